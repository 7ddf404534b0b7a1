/** Close codes, handshake refusals and recovery, against the fake server. */
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { TidegateError } from "../../src/errors.js";
import type { ClientOptions } from "../../src/types.js";
import { connectedRig, FakeClock, FakeServer } from "../helpers/setup.js";
import { nextEvent, nextState, settle } from "../helpers/events.js";
import { BrowserLikeWebSocket } from "../helpers/browser-like-ws.js";

function clientFor(server: FakeServer, clock: FakeClock, options: Partial<ClientOptions> = {}) {
  return new TidegateClient({
    transport: "websocket",
    url: server.url,
    token: "tok",
    WebSocket,
    clock,
    random: () => 0.5,
    ...options,
  });
}

test("the handshake offers tidegate.v1 and bearer.<token>", async () => {
  const rig = await connectedRig({ token: "abc.def.ghi" });
  try {
    const hs = await rig.server.handshake(1);
    assert.deepEqual(hs.protocols, ["tidegate.v1", "bearer.abc.def.ghi"]);
    assert.equal(rig.client.welcome?.limits.burst, 20);
  } finally {
    await rig.cleanup();
  }
});

test("after 1012 it reconnects with jitter, resubscribes with since, and delivers in order without duplicates", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    const got: number[] = [];
    await client.subscribe("doc:1", (_d, m) => got.push(m.seq));
    for (const seq of [1, 2, 3]) conn.send({ type: "message", channel: "doc:1", seq, data: seq });
    await nextEvent(client, "message", (m) => m.seq === 3);
    server.script = (c, frame) => {
      if (frame.type === "subscribe") {
        c.send({ type: "ack", id: frame.id, recovered: true });
        // held history overlapping what the client already has, then live ones
        for (const seq of [2, 3, 4, 5]) c.send({ type: "message", channel: "doc:1", seq, data: seq });
        c.send({ type: "message", channel: "doc:1", seq: 6, data: 6 });
      } else c.answer(frame);
    };
    const states: string[] = [];
    client.on("state", (s) => states.push(s.state));
    const close = nextEvent(client, "close");
    conn.close(1012, "restart");
    const { reconnect, code } = await close;
    assert.equal(code, 1012);
    assert.ok(reconnect && reconnect.delayMs >= 0 && reconnect.delayMs < 1000);
    clock.advance(reconnect!.delayMs);
    const conn2 = await server.connection(2);
    const sub = await conn2.waitFor((f) => f.type === "subscribe");
    assert.equal(sub.since, 3, "since = the last seq seen");
    await nextEvent(client, "message", (m) => m.seq === 6);
    assert.deepEqual(got, [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(states.slice(0, 3), ["reconnecting", "connecting", "connected"]);
    assert.equal(client.lastSeq("doc:1"), 6);
  } finally {
    await rig.cleanup();
  }
});

test("recovered:false emits a gap event for that channel", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    await client.subscribe("doc:9", () => undefined, { since: 41 });
    assert.equal((await conn.waitFor((f) => f.type === "subscribe")).since, 41);
    server.script = (c, frame) => {
      if (frame.type === "subscribe") c.send({ type: "ack", id: frame.id, recovered: false });
      else c.answer(frame);
    };
    const gap = nextEvent(client, "gap");
    const close = nextEvent(client, "close");
    conn.close(1001, "going away");
    clock.advance((await close).reconnect!.delayMs);
    assert.deepEqual(await gap, { channel: "doc:9", since: 41 });
  } finally {
    await rig.cleanup();
  }
});

test("1008 surfaces account_rate_limited once and backs off at least accountLimitedDelayMs", async () => {
  const rig = await connectedRig({ accountLimitedDelayMs: 20_000 });
  const { client, conn, clock, server } = rig;
  try {
    const errors: TidegateError[] = [];
    client.on("error", (e) => errors.push(e));
    const close = nextEvent(client, "close");
    conn.send({ type: "error", code: "account_rate_limited", message: "account over budget" });
    conn.close(1008, "account message budget exceeded");
    const { code, reconnect } = await close;
    assert.equal(code, 1008);
    assert.deepEqual(
      errors.map((e) => e.code),
      ["account_rate_limited"],
      "one error, from the frame",
    );
    assert.ok(reconnect!.delayMs >= 20_000);
    clock.advance(19_999);
    assert.equal(client.state, "reconnecting", "still waiting before the floor");
    clock.advance(reconnect!.delayMs - 19_999);
    await server.connection(2);
    await nextState(client, "connected");
  } finally {
    await rig.cleanup();
  }
});

test("1008 without a frame still surfaces account_rate_limited", async () => {
  const rig = await connectedRig();
  try {
    const err = nextEvent(rig.client, "error");
    rig.conn.close(1008, "");
    const e = await err;
    assert.equal(e.code, "account_rate_limited");
    assert.equal(e.closeCode, 1008);
  } finally {
    await rig.cleanup();
  }
});

test("4029 waits at least the retryAfterMs the server sent before closing", async () => {
  const rig = await connectedRig();
  try {
    const close = nextEvent(rig.client, "close");
    rig.conn.send({ type: "error", code: "too_many_connections", retryAfterMs: 8000 });
    rig.conn.close(4029, "account connection cap reached");
    const { reconnect } = await close;
    assert.ok(reconnect!.delayMs >= 8000, `waited ${reconnect!.delayMs}`);
  } finally {
    await rig.cleanup();
  }
});

test("4008 (slow consumer) reconnects with jitter; slow_consumer frames are an event", async () => {
  const rig = await connectedRig();
  try {
    const slow = nextEvent(rig.client, "slowConsumer");
    rig.conn.send({ type: "error", code: "slow_consumer", dropped: 12 });
    assert.deepEqual(await slow, { dropped: 12 });
    const close = nextEvent(rig.client, "close");
    rig.conn.close(4008, "slow consumer");
    const { reconnect } = await close;
    assert.ok(reconnect && reconnect.delayMs < 1000);
  } finally {
    await rig.cleanup();
  }
});

test("a handshake 429 waits at least Retry-After and reports the refusal", async () => {
  const server = await FakeServer.start();
  server.refusals.push({ status: 429, code: "too_many_connections", retryAfterSec: 3 });
  const clock = new FakeClock();
  const client = clientFor(server, clock);
  try {
    const err = nextEvent(client, "error");
    const close = nextEvent(client, "close");
    const connected = client.connect();
    const e = await err;
    assert.equal(e.code, "too_many_connections");
    assert.equal(e.status, 429);
    const c = await close;
    assert.equal(c.wasOpen, false);
    assert.deepEqual(c.refusal, {
      status: 429,
      code: "too_many_connections",
      message: "refused by the fake server",
      retryAfterMs: 3000,
    });
    assert.ok(c.reconnect!.delayMs >= 3000 && c.reconnect!.delayMs < 4000);
    clock.advance(2999);
    assert.equal(client.state, "reconnecting");
    clock.advance(c.reconnect!.delayMs - 2999);
    await connected;
    assert.equal(server.handshakes.length, 2);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a 503 from a draining node waits at least Retry-After", async () => {
  const server = await FakeServer.start();
  server.refusals.push({ status: 503, code: "draining", retryAfterSec: 1 });
  const client = clientFor(server, new FakeClock(), { random: () => 0 });
  try {
    const close = nextEvent(client, "close");
    void settle(client.connect());
    const c = await close;
    assert.equal(c.refusal?.code, "draining");
    assert.equal(c.reconnect!.delayMs, 1000);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a 401 calls getToken() again and connects with the new token", async () => {
  const server = await FakeServer.start();
  server.refusals.push({ status: 401, code: "unauthorized" });
  const clock = new FakeClock();
  const tokens = ["expired-token", "fresh-token"];
  let calls = 0;
  const client = clientFor(server, clock, {
    token: undefined,
    getToken: async () => tokens[calls++]!,
  });
  try {
    const close = nextEvent(client, "close");
    const connected = client.connect();
    const c = await close;
    assert.equal(c.refusal?.status, 401);
    clock.advance(c.reconnect!.delayMs);
    await connected;
    assert.equal(calls, 2);
    assert.deepEqual(
      server.handshakes.map((h) => h.token),
      ["expired-token", "fresh-token"],
    );
  } finally {
    client.close();
    await server.stop();
  }
});

test("a 401 with a fixed token stops: connect() rejects with unauthorized", async () => {
  const server = await FakeServer.start();
  server.refusals.push({ status: 401, code: "unauthorized" });
  const client = clientFor(server, new FakeClock());
  try {
    const errors: TidegateError[] = [];
    client.on("error", (e) => errors.push(e));
    const r = await settle(client.connect());
    assert.equal(!r.ok && r.error.code, "unauthorized");
    assert.deepEqual(errors.map((e) => [e.code, e.status]), [["unauthorized", 401]], "reported once");
    assert.equal(client.state, "closed");
    assert.equal(server.handshakes.length, 1);
  } finally {
    client.close();
    await server.stop();
  }
});

test("getToken() failures are reported and retried with backoff", async () => {
  const server = await FakeServer.start();
  const clock = new FakeClock();
  let calls = 0;
  const client = clientFor(server, clock, {
    token: undefined,
    getToken: () => {
      calls += 1;
      if (calls === 1) throw new Error("auth service down");
      return "tok";
    },
  });
  try {
    const err = nextEvent(client, "error");
    const close = nextEvent(client, "close");
    const connected = client.connect();
    assert.equal((await err).code, "token_error");
    clock.advance((await close).reconnect!.delayMs);
    await connected;
    assert.equal(calls, 2);
  } finally {
    client.close();
    await server.stop();
  }
});

test("browser-style refusals (1006 before open) back off with growing jittered windows", async () => {
  const server = await FakeServer.start();
  for (let i = 0; i < 4; i += 1) server.refusals.push({ status: 429, code: "ip_rate_limited", retryAfterSec: 1 });
  const clock = new FakeClock();
  let tokenCalls = 0;
  const client = clientFor(server, clock, {
    WebSocket: BrowserLikeWebSocket,
    token: undefined,
    getToken: () => `t${++tokenCalls}`,
    random: () => 0.999,
  });
  try {
    const delays: number[] = [];
    const connected = client.connect();
    for (let i = 0; i < 4; i += 1) {
      const c = await nextEvent(client, "close");
      assert.equal(c.wasOpen, false);
      assert.equal(c.refusal, undefined, "the browser cannot read the status");
      delays.push(c.reconnect!.delayMs);
      clock.advance(c.reconnect!.delayMs);
    }
    await connected;
    for (let i = 1; i < delays.length; i += 1) {
      assert.ok(delays[i]! > delays[i - 1]!, `windows grow: ${delays}`);
    }
    assert.ok(delays[3]! < 8000 && delays[3]! >= 7000, `step 3 window is 8 s: ${delays}`);
    assert.equal(tokenCalls, 5, "a fresh token for every attempt after an unreadable refusal");
  } finally {
    client.close();
    await server.stop();
  }
});

test("1009 rejects the frame in flight and never resends it", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type === "publish" && frame.data === "huge") c.close(1009, "too big");
      else c.answer(frame);
    };
    const closed = nextEvent(client, "close");
    const r = await settle(client.publish("doc:1", "huge"));
    assert.equal(!r.ok && r.error.code, "disconnected");
    assert.equal(!r.ok && r.error.closeCode, 1009);
    const close = await closed;
    assert.equal(close.code, 1009);
    clock.advance(close.reconnect!.delayMs);
    const conn2 = await server.connection(2);
    await client.connect();
    await rig.sync();
    assert.equal(conn2.of("publish").length, 0);
    assert.equal(conn.of("publish").length, 1);
  } finally {
    await rig.cleanup();
  }
});

function jwtExpiringAt(expSec: number, tag: string): string {
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ sub: "acme", exp: expSec, tag })}.sig`;
}

test("an expired fixed token stops before any handshake", async () => {
  const server = await FakeServer.start();
  const client = clientFor(server, new FakeClock(), {
    token: jwtExpiringAt(Math.floor(Date.now() / 1000) - 60, "old"),
  });
  try {
    const r = await settle(client.connect());
    assert.equal(!r.ok && r.error.code, "unauthorized");
    assert.equal(server.handshakes.length, 0);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a token whose exp has passed is replaced through getToken() before reconnecting", async () => {
  const server = await FakeServer.start();
  const clock = new FakeClock();
  const now = Math.floor(Date.now() / 1000);
  const tokens = [jwtExpiringAt(now - 1, "stale"), jwtExpiringAt(now + 3600, "fresh")];
  let calls = 0;
  const client = clientFor(server, clock, { token: undefined, getToken: () => tokens[calls++]! });
  try {
    await client.connect();
    const conn = await server.connection(1);
    const close = nextEvent(client, "close");
    conn.close(1012, "restart");
    clock.advance((await close).reconnect!.delayMs);
    await server.connection(2);
    assert.equal(calls, 2);
    assert.deepEqual(
      server.handshakes.map((h) => h.token),
      tokens,
    );
  } finally {
    client.close();
    await server.stop();
  }
});
