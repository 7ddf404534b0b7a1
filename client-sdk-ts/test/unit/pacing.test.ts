import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import { TidegateError } from "../../src/errors.js";
import { connectedRig, FakeClock } from "../helpers/setup.js";
import { nextEvent, settle } from "../helpers/events.js";

test("a burst is smoothed to the welcome limits (90%) instead of being sent at once", async () => {
  const rig = await connectedRig({}, { messagesPerSec: 10, burst: 10 });
  try {
    const { client, conn, clock, sync } = rig;
    const publishes = Array.from({ length: 30 }, (_, i) => client.publish("doc:1", { i }));
    await sync();
    assert.equal(conn.of("publish").length, 9, "the local burst is 90% of the server's");
    clock.advance(1000);
    await sync();
    const afterOneSecond = conn.of("publish").length;
    assert.ok(afterOneSecond > 9 && afterOneSecond <= 9 + 9 + 1, `9/s refill, got ${afterOneSecond}`);
    clock.advance(3000);
    const results = await Promise.all(publishes);
    assert.deepEqual(
      results.map((r) => r.seq),
      Array.from({ length: 30 }, (_, i) => i + 1),
      "acked in order",
    );
    assert.deepEqual(
      conn.of("publish").map((f) => f.data.i),
      Array.from({ length: 30 }, (_, i) => i),
      "sent in order",
    );
    assert.ok(results.every((r) => r.attempts === 1));
  } finally {
    await rig.cleanup();
  }
});

test("a budget frame lowers the local balance to what the server reports", async () => {
  const rig = await connectedRig({}, { messagesPerSec: 10, burst: 10 });
  try {
    const { client, conn, clock, sync } = rig;
    const budget = nextEvent(client, "budget");
    conn.send({
      type: "budget",
      connection: { remaining: 2, capacity: 10, refillPerSec: 10 },
      account: { remaining: 150, capacity: 200, refillPerSec: 100 },
    });
    assert.equal((await budget).connection?.remaining, 2);
    const view = client.budget();
    assert.ok(view.connection && view.connection.tokens <= 2);
    const publishes = Array.from({ length: 6 }, () => client.publish("doc:1", "x"));
    await sync();
    assert.equal(conn.of("publish").length, 2);
    clock.advance(2000);
    await Promise.all(publishes);
  } finally {
    await rig.cleanup();
  }
});

test("the local queue is bounded and says so when full", async () => {
  const client = new TidegateClient({
    transport: "websocket",
    url: "ws://127.0.0.1:9/v1/ws",
    token: "tok",
    WebSocket,
    clock: new FakeClock(),
    maxQueue: 3,
  });
  const queued = [1, 2, 3].map((i) => settle(client.publish("doc:1", i)));
  const overflow = await settle(client.publish("doc:1", 4));
  assert.equal(overflow.ok, false);
  assert.ok(!overflow.ok && overflow.error instanceof TidegateError);
  assert.equal(!overflow.ok && overflow.error.code, "queue_full");
  assert.equal(!overflow.ok && overflow.error.temporary, true);
  assert.equal(client.budget().queued, 3);
  client.close();
  for (const r of await Promise.all(queued)) {
    assert.equal(!r.ok && r.error.code, "closed", "queued publishes settle on close");
  }
});

test("a publish above maxPayloadBytes is refused locally and the socket stays open", async () => {
  const rig = await connectedRig({}, { maxPayloadBytes: 200 });
  try {
    const { client, conn, sync } = rig;
    const big = await settle(client.publish("doc:1", "x".repeat(500)));
    assert.equal(!big.ok && big.error.code, "payload_too_large");
    const small = await client.publish("doc:1", "ok");
    assert.equal(small.seq, 1);
    await sync();
    assert.equal(conn.of("publish").length, 1, "the large frame never reached the server");
    assert.equal(client.state, "connected");
  } finally {
    await rig.cleanup();
  }
});

test("budget requests are answered and emitted without waiting for the queue", async () => {
  const rig = await connectedRig({}, { messagesPerSec: 1, burst: 1 });
  try {
    const { client } = rig;
    const queued = [1, 2, 3].map((i) => client.publish("doc:1", i));
    const seen = nextEvent(client, "budget");
    const frame = await client.requestBudget();
    assert.equal(frame.connection?.capacity, 1);
    assert.equal((await seen).id, frame.id);
    assert.ok(client.budget().queued >= 1, "publishes were still waiting for tokens");
    rig.clock.advance(5000);
    await Promise.all(queued);
  } finally {
    await rig.cleanup();
  }
});
