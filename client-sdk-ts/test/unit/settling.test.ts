/** Every promise settles: on ack, on a typed error, on close, or on timeout. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { TidegateError } from "../../src/errors.js";
import { connectedRig, FakeServer, FakeClock } from "../helpers/setup.js";
import { nextEvent, nextState, settle } from "../helpers/events.js";
import { TidegateClient } from "../../src/client.js";
import WebSocket from "ws";

test("publish, subscribe and connect on a closed client reject with `closed`", async () => {
  const rig = await connectedRig();
  try {
    rig.client.close();
    assert.equal(rig.client.state, "closed");
    for (const p of [
      rig.client.publish("doc:1", 1),
      rig.client.subscribe("doc:1", () => undefined),
      rig.client.connect(),
      rig.client.requestBudget(),
    ]) {
      const r = await settle(p as Promise<unknown>);
      assert.ok(!r.ok && r.error instanceof TidegateError);
      assert.equal(!r.ok && r.error.code, "closed");
    }
  } finally {
    await rig.cleanup();
  }
});

test("publishes in flight when the socket closes are sent again with their keys after the reconnect, before the queued ones", async () => {
  const rig = await connectedRig({}, { messagesPerSec: 1, burst: 1 });
  const { client, conn, clock, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type === "publish" && c === conn) return; // never answered on the first socket
      c.answer(frame);
    };
    const inFlight = client.publish("doc:1", "sent");
    const queued = client.publish("doc:1", "waiting");
    const first = await conn.waitFor((f) => f.type === "publish");
    assert.equal(client.budget().queued, 1);
    const closed = nextEvent(client, "close");
    conn.close(1012, "restart");
    const close = await closed;
    assert.equal(close.code, 1012);
    assert.ok(close.reconnect && close.reconnect.delayMs < 1000, "jittered from the minimum");
    assert.equal(client.budget().queued, 2, "the one in flight waits with the queued one");
    const welcomed = nextEvent(client, "welcome");
    clock.advance(close.reconnect!.delayMs);
    const conn2 = await server.connection(2);
    await welcomed;
    clock.advance(2000);
    const [a, b] = await Promise.all([inFlight, queued]);
    assert.equal(a.attempts, 2);
    assert.equal(a.key, first.key);
    assert.equal(b.attempts, 1);
    assert.deepEqual(
      conn2.of("publish").map((f) => [f.data, f.key]),
      [
        ["sent", first.key],
        ["waiting", b.key],
      ],
      "the cut one first, with its key, then the queued one",
    );
    assert.deepEqual([a.seq, b.seq], [1, 2]);
  } finally {
    await rig.cleanup();
  }
});

test("a publish with no answer rejects with `timeout` after its timeoutMs; a late ack is ignored", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    let held: Record<string, any> | undefined;
    server.script = (c, frame) => {
      if (frame.type === "publish" && frame.data === "slow") held = frame;
      else c.answer(frame);
    };
    const slow = settle(client.publish("doc:1", "slow", { timeoutMs: 2000 }));
    await conn.waitFor((f) => f.data === "slow");
    clock.advance(1999);
    clock.advance(1);
    const r = await slow;
    assert.equal(!r.ok && r.error.code, "timeout");
    conn.answer(held!); // late ack: must not throw or resolve anything
    const next = await client.publish("doc:1", "fast");
    assert.equal(next.seq, 2);
  } finally {
    await rig.cleanup();
  }
});

test("close() rejects pending publishes, subscribes and connect() with `closed`", async () => {
  const server = await FakeServer.start();
  server.welcome = false;
  const client = new TidegateClient({
    transport: "websocket",
    url: server.url,
    token: "tok",
    WebSocket,
    clock: new FakeClock(),
  });
  try {
    const connecting = settle(client.connect());
    const pub = settle(client.publish("doc:1", 1));
    const sub = settle(client.subscribe("doc:1", () => undefined));
    await server.connection(1);
    client.close();
    for (const r of await Promise.all([connecting, pub, sub])) {
      assert.equal(!r.ok && r.error.code, "closed");
    }
  } finally {
    client.close();
    await server.stop();
  }
});

test("connect() rejects with `timeout` when no welcome comes in time, and the client keeps trying", async () => {
  const server = await FakeServer.start();
  server.welcome = false;
  const clock = new FakeClock();
  const client = new TidegateClient({
    transport: "websocket",
    url: server.url,
    token: "tok",
    WebSocket,
    clock,
    random: () => 0.5,
    welcomeTimeoutMs: 3000,
  });
  try {
    const opened = nextEvent(client, "open");
    const connecting = settle(client.connect({ timeoutMs: 5000 }));
    assert.equal((await opened).protocol, "tidegate.v1");
    const closed = nextEvent(client, "close");
    clock.advance(3000);
    const close = await closed;
    assert.equal(close.wasOpen, true);
    assert.ok(close.reconnect);
    clock.advance(2000);
    const r = await connecting;
    assert.equal(!r.ok && r.error.code, "timeout");
    server.welcome = true;
    clock.advance(10_000);
    await nextState(client, "connected");
  } finally {
    client.close();
    await server.stop();
  }
});

test("errors answering a request reject it with the protocol code", async () => {
  const rig = await connectedRig();
  const { client, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.channel === "secret:1") {
        c.send({ type: "error", id: frame.id, code: "forbidden", message: "not in pub_channels" });
      } else c.answer(frame);
    };
    const pub = await settle(client.publish("secret:1", 1));
    assert.ok(!pub.ok && pub.error instanceof TidegateError);
    assert.equal(pub.error.code, "forbidden");
    assert.equal(pub.error.temporary, false);
    assert.equal(pub.error.message, "not in pub_channels");
    const errors: TidegateError[] = [];
    client.on("error", (e) => errors.push(e));
    const sub = await settle(client.subscribe("secret:1", () => undefined));
    assert.equal(!sub.ok && sub.error.code, "forbidden");
    assert.equal(client.lastSeq("secret:1"), undefined);
    assert.equal(errors[0]?.channel, "secret:1", "a failed subscribe is also an error event");
  } finally {
    await rig.cleanup();
  }
});

test("unsubscribe stops delivery at once and is acked by the server", async () => {
  const rig = await connectedRig();
  const { client, conn } = rig;
  try {
    const got: number[] = [];
    await client.subscribe("doc:1", (_d, m) => got.push(m.seq));
    conn.send({ type: "message", channel: "doc:1", seq: 1, data: "a" });
    await nextEvent(client, "message");
    await client.unsubscribe("doc:1");
    assert.equal(conn.of("unsubscribe").length, 1);
    conn.send({ type: "message", channel: "doc:1", seq: 2, data: "b" });
    await rig.sync();
    assert.deepEqual(got, [1]);
  } finally {
    await rig.cleanup();
  }
});

test("a subscribe made before connect() is sent once the welcome arrives", async () => {
  const server = await FakeServer.start();
  const client = new TidegateClient({ transport: "websocket", url: server.url, token: "tok", WebSocket, clock: new FakeClock() });
  try {
    const got: unknown[] = [];
    const ready = client.subscribe("doc:early", (d) => got.push(d));
    await client.connect();
    assert.deepEqual(await ready, { channel: "doc:early", recovered: undefined });
    const conn = await server.connection(1);
    conn.send({ type: "message", channel: "doc:early", seq: 1, data: "hi" });
    await nextEvent(client, "message");
    assert.deepEqual(got, ["hi"]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("with reconnect: false a close leaves the client idle until connect() is called again", async () => {
  const rig = await connectedRig({ reconnect: false });
  try {
    const close = nextEvent(rig.client, "close");
    rig.conn.close(1012, "restart");
    assert.equal((await close).reconnect, null);
    assert.equal(rig.client.state, "idle");
    await rig.client.connect();
    await rig.server.connection(2);
    assert.equal(rig.client.state, "connected");
  } finally {
    await rig.cleanup();
  }
});
