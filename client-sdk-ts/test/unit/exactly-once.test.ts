/**
 * Publishing exactly once (PROTOCOL.md §17), against the fake server (which
 * answers a key it has seen with the first `seq` and `duplicate`, as the
 * broker does) on a fake clock: keys, the resend after a cut, the order
 * per channel, the bounds of what the client holds, and the deadline.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import { generateKey, validKey } from "../../src/keys.js";
import { publishDeadlineMs } from "../../src/publishes.js";
import { connectedRig, FakeClock } from "../helpers/setup.js";
import { nextEvent, settle } from "../helpers/events.js";
import type { FakeConn } from "../helpers/fake-server.js";
import type { TidegateClient as Client } from "../../src/client.js";
import type { FakeClock as Clock } from "../helpers/fake-clock.js";

/** Cuts `conn` and waits for the client's next connection (the fake clock runs the backoff). */
async function cutAndReconnect(client: Client, clock: Clock, conn: FakeConn, next: () => Promise<FakeConn>) {
  const closed = nextEvent(client, "close");
  conn.ws.terminate();
  const close = await closed;
  clock.advance(close.reconnect!.delayMs);
  const conn2 = await next();
  await nextEvent(client, "welcome");
  return conn2;
}

test("keys: generated ones are valid and distinct; the rule is 1–64 bytes of [A-Za-z0-9_.:-]", () => {
  const keys = new Set(Array.from({ length: 1000 }, () => generateKey()));
  assert.equal(keys.size, 1000);
  for (const k of keys) assert.ok(validKey(k), k);
  assert.ok(validKey("a"));
  assert.ok(validKey("order-42:line_7.v2"));
  assert.ok(validKey("k".repeat(64)));
  for (const bad of ["", "k".repeat(65), "has space", "slash/no", "ümlaut", 7, undefined]) {
    assert.equal(validKey(bad), false, String(bad));
  }
});

test("every publish frame carries a key: the caller's, or a generated one; a bad key rejects before sending", async () => {
  const rig = await connectedRig();
  const { client, conn } = rig;
  try {
    const mine = await client.publish("doc:1", "a", { key: "order-42" });
    const generated = await client.publish("doc:1", "b");
    assert.equal(mine.key, "order-42");
    assert.ok(validKey(generated.key));
    assert.deepEqual(
      conn.of("publish").map((f) => f.key),
      ["order-42", generated.key],
    );
    const bad = await settle(client.publish("doc:1", "c", { key: "no spaces" }));
    assert.equal(!bad.ok && bad.error.code, "bad_request");
    await rig.sync();
    assert.equal(conn.of("publish").length, 2, "the bad one was not sent");
  } finally {
    await rig.cleanup();
  }
});

test("a publish the broker took but whose ack was cut off resolves once, with the first seq", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type === "publish" && c === conn) {
        c.publish(frame); // published, but the answer is lost with the socket
        return;
      }
      c.answer(frame);
    };
    const p = client.publish("doc:1", "once");
    const sent = await conn.waitFor((f) => f.type === "publish");
    const conn2 = await cutAndReconnect(client, clock, conn, () => server.connection(2));
    const r = await p;
    assert.deepEqual(r, { seq: 1, attempts: 2, key: sent.key, duplicate: true });
    assert.equal(conn2.of("publish")[0]?.key, sent.key, "sent again with the same key");
    assert.equal(server.published.length, 1, "published once");
    assert.equal(client.budget().inFlight, 0);
  } finally {
    await rig.cleanup();
  }
});

test("publishes cut off mid-flight go out again in the order they were made, per channel, ahead of newer ones", async () => {
  const rig = await connectedRig({ pacing: false });
  const { client, conn, clock, server } = rig;
  try {
    // The first socket publishes every other frame and answers none.
    let n = 0;
    server.script = (c, frame) => {
      if (frame.type === "publish" && c === conn) {
        if (n++ % 2 === 0) c.publish(frame);
        return;
      }
      c.answer(frame);
    };
    const made: Array<Promise<{ seq: number; key: string }>> = [];
    for (let i = 0; i < 6; i += 1) made.push(client.publish(i % 2 ? "doc:b" : "doc:a", { i }));
    await conn.waitFor((f) => f.type === "publish" && f.data.i === 5);
    const closed = nextEvent(client, "close");
    conn.ws.terminate();
    const close = await closed;
    // Made while disconnected: after the cut-off ones.
    for (let i = 6; i < 8; i += 1) made.push(client.publish(i % 2 ? "doc:b" : "doc:a", { i }));
    clock.advance(close.reconnect!.delayMs);
    const conn2 = await server.connection(2);
    const results = await Promise.all(made);
    assert.deepEqual(
      conn2.of("publish").map((f) => f.data.i),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
    for (const ch of ["doc:a", "doc:b"]) {
      const seqs = server.published.filter((m) => m.channel === ch).map((m) => (m.data as { i: number }).i);
      assert.deepEqual(seqs, ch === "doc:a" ? [0, 2, 4, 6] : [1, 3, 5, 7], `${ch}: once each, in order`);
    }
    const bySeq = results.map((r) => r.seq);
    assert.deepEqual(bySeq, [1, 1, 2, 2, 3, 3, 4, 4], "each resolves with its one seq");
  } finally {
    await rig.cleanup();
  }
});

test("a publish refused for a passing reason is sent again with its key; a refusal retrying cannot help rejects at once", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    let refusedOnce = false;
    server.script = (c, frame) => {
      if (frame.type === "publish" && frame.data === "flaky" && !refusedOnce) {
        refusedOnce = true;
        c.send({ type: "error", id: frame.id, code: "internal", message: "redis failing over", retryAfterMs: 200 });
      } else if (frame.type === "publish" && frame.data === "secret") {
        c.send({ type: "error", id: frame.id, code: "forbidden", message: "not yours" });
      } else c.answer(frame);
    };
    const flaky = client.publish("doc:1", "flaky");
    const secret = settle(client.publish("doc:1", "secret"));
    const s = await secret;
    assert.equal(!s.ok && s.error.code, "forbidden");
    assert.ok(!s.ok && typeof s.error.key === "string");
    await conn.waitFor((f) => f.data === "flaky");
    await rig.sync();
    clock.advance(200);
    const r = await flaky;
    assert.equal(r.attempts, 2);
    const sends = conn.of("publish").filter((f) => f.data === "flaky");
    assert.equal(sends.length, 2);
    assert.equal(sends[0]!.key, sends[1]!.key);
    assert.equal(conn.of("publish").filter((f) => f.data === "secret").length, 1, "never resent");
  } finally {
    await rig.cleanup();
  }
});

test("unsettled publishes are bounded by count and bytes, in flight included; settling frees the room", async () => {
  const rig = await connectedRig({ maxQueue: 3, maxQueueBytes: 100_000 });
  const { client, conn, server } = rig;
  try {
    let held: Array<Record<string, any>> = [];
    server.script = (c, frame) => {
      if (frame.type === "publish") held.push(frame);
      else c.answer(frame);
    };
    const three = [1, 2, 3].map((i) => client.publish("doc:1", i));
    await conn.waitFor((f) => f.data === 3);
    assert.equal(client.budget().inFlight, 3, "all three are in flight, none queued");
    const over = await settle(client.publish("doc:1", 4));
    assert.equal(!over.ok && over.error.code, "queue_full");
    for (const f of held) conn.send(conn.publish(f));
    held = [];
    await Promise.all(three);
    const fits = client.publish("doc:1", 5);
    await conn.waitFor((f) => f.data === 5);
    conn.send(conn.publish(held[0]!));
    assert.equal((await fits).seq, 4);
  } finally {
    await rig.cleanup();
  }
  const bytes = await connectedRig({ maxQueueBytes: 1000 });
  try {
    bytes.server.script = (c, frame) => {
      if (frame.type !== "publish") c.answer(frame);
    };
    const big = "x".repeat(400);
    void settle(bytes.client.publish("doc:1", big));
    void settle(bytes.client.publish("doc:1", big));
    const over = await settle(bytes.client.publish("doc:1", big));
    assert.equal(!over.ok && over.error.code, "queue_full");
    assert.match(!over.ok ? over.error.message : "", /maxQueueBytes \(1000\)/);
  } finally {
    await bytes.cleanup();
  }
});

test("the deadline: the idempotency window less a margin, the welcome's window when shorter", async () => {
  assert.equal(publishDeadlineMs(300_000), 290_000);
  assert.equal(publishDeadlineMs(10_000), 9_000);
  assert.equal(publishDeadlineMs(300_000, 5_000), 5_000);
  assert.equal(publishDeadlineMs(10_000, 60_000), 9_000, "a timeout cannot outlast the window");

  const rig = await connectedRig({ idempotencyWindowMs: 10_000 });
  const { client, conn, clock, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type !== "publish") c.answer(frame);
    };
    const p = settle(client.publish("doc:1", "unanswered"));
    const sent = await conn.waitFor((f) => f.type === "publish");
    clock.advance(8_999);
    await rig.sync();
    clock.advance(1);
    const r = await p;
    assert.equal(!r.ok && r.error.code, "timeout");
    assert.equal(!r.ok && r.error.key, sent.key);
    assert.equal(!r.ok && r.error.attempts, 1);
  } finally {
    await rig.cleanup();
  }

  const advertised = await connectedRig({ idempotencyWindowMs: 10_000 }, { idempotencyWindowMs: 4_000 });
  try {
    advertised.server.script = (c, frame) => {
      if (frame.type !== "publish") c.answer(frame);
    };
    assert.equal(advertised.client.idempotencyWindowMs(), 4_000);
    const p = settle(advertised.client.publish("doc:1", "unanswered"));
    await advertised.conn.waitFor((f) => f.type === "publish");
    advertised.clock.advance(3_599);
    await advertised.sync();
    advertised.clock.advance(1);
    assert.equal(((await p) as { ok: false; error: { code: string } }).error.code, "timeout");
  } finally {
    await advertised.cleanup();
  }
});

test("a publish made while disconnected waits for the connection, and is bounded by its deadline", async () => {
  const clock = new FakeClock();
  const client = new TidegateClient({
    transport: "websocket",
    url: "ws://127.0.0.1:9/v1/ws",
    token: "tok",
    WebSocket,
    clock,
    idempotencyWindowMs: 20_000,
  });
  try {
    const p = settle(client.publish("doc:1", "never connected"));
    clock.advance(17_999);
    assert.equal(client.budget().queued, 1);
    clock.advance(1);
    const r = await p;
    assert.equal(!r.ok && r.error.code, "timeout");
    assert.equal(!r.ok && r.error.attempts, 0, "never sent: it surely did not go out");
    assert.equal(client.budget().queued, 0);
  } finally {
    client.close();
  }
});
