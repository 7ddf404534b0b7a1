/**
 * The SDK's side of backend hooks (PROTOCOL.md §15), against the fake
 * server on a fake clock: `rpc()`, a client without a token, the
 * `welcome`'s server-side channels as subscriptions, `expiry` frames, and
 * a hook's refusals as typed errors (handshake and frames).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import { TidegateError } from "../../src/errors.js";
import { planReconnect } from "../../src/reconnect.js";
import { sseTransport, type FetchLike } from "../../src/transports/sse.js";
import type { TransportClose } from "../../src/transport.js";
import type { ClientOptions } from "../../src/types.js";
import { connectedRig, FakeClock, FakeServer } from "../helpers/setup.js";
import { nextEvent, settle } from "../helpers/events.js";

function tokenless(server: FakeServer, clock: FakeClock, options: Partial<ClientOptions> = {}) {
  return new TidegateClient({
    transport: "websocket",
    url: server.url,
    WebSocket,
    clock,
    random: () => 0.5,
    ...options,
  });
}

const SETTINGS = {
  minDelayMs: 1000,
  maxDelayMs: 30_000,
  accountLimitedDelayMs: 30_000,
  connectionCapDelayMs: 5000,
  stableAfterMs: 10_000,
};

// ------------------------------------------------------------------ rpc ---

test("rpc sends {type, method, data, id} and resolves with the reply's data", async () => {
  const rig = await connectedRig();
  try {
    rig.server.script = (conn, f) => {
      if (f.type === "rpc") conn.send({ type: "rpc", id: f.id, data: { echoed: f.data, method: f.method } });
      else conn.answer(f);
    };
    const reply = await rig.client.rpc("cart.add", { sku: "A1", n: 2 });
    assert.deepEqual(reply, { echoed: { sku: "A1", n: 2 }, method: "cart.add" });
    const frame = rig.conn.of("rpc")[0]!;
    assert.deepEqual(Object.keys(frame).sort(), ["data", "id", "method", "type"]);
    assert.equal(typeof frame.id, "number");
    // No data: sent as null; a reply without data resolves null.
    rig.server.script = (conn, f) => (f.type === "rpc" ? conn.send({ type: "rpc", id: f.id }) : conn.answer(f));
    assert.equal(await rig.client.rpc("ping"), null);
    assert.equal(rig.conn.of("rpc")[1]!.data, null);
  } finally {
    await rig.cleanup();
  }
});

test("an rpc the backend refuses rejects with its code, message and retryAfterMs", async () => {
  const rig = await connectedRig();
  try {
    rig.server.script = (conn, f) => {
      if (f.type !== "rpc") return conn.answer(f);
      if (f.method === "pay") {
        conn.send({ type: "error", id: f.id, code: "card_declined", message: "the card was declined", retryAfterMs: 2500 });
      } else {
        conn.send({ type: "error", id: f.id, code: "hook_unavailable", message: "the backend did not answer", retryAfterMs: 800 });
      }
    };
    const declined = await settle(rig.client.rpc("pay", { amount: 3 }));
    assert.equal(declined.ok, false);
    const e = (declined as { error: TidegateError }).error;
    assert.ok(e instanceof TidegateError);
    assert.equal(e.code, "card_declined");
    assert.equal(e.message, "the card was declined");
    assert.equal(e.retryAfterMs, 2500);
    assert.equal(e.temporary, false, "a backend's own code is not retried by the SDK");
    const down = await settle(rig.client.rpc("other"));
    const d = (down as { error: TidegateError }).error;
    assert.equal(d.code, "hook_unavailable");
    assert.equal(d.temporary, true);
    assert.equal(d.retryAfterMs, 800);
    assert.equal(rig.conn.of("rpc").length, 2, "neither was sent again");
  } finally {
    await rig.cleanup();
  }
});

test("an rpc in flight at a disconnect rejects disconnected and is never sent again", async () => {
  const rig = await connectedRig();
  const { client, conn, server, clock } = rig;
  try {
    server.script = (c, f) => (f.type === "rpc" ? undefined : c.answer(f)); // never answered
    const call = settle(client.rpc("order.place", { id: 7 }));
    await conn.waitFor((f) => f.type === "rpc");
    const closed = nextEvent(client, "close");
    conn.close(1012, "restart");
    const r = await call;
    assert.equal(r.ok, false);
    assert.equal((r as { error: TidegateError }).error.code, "disconnected");
    assert.equal((r as { error: TidegateError }).error.closeCode, 1012);
    const { reconnect } = await closed;
    const welcomed = nextEvent(client, "welcome");
    clock.advance(reconnect!.delayMs);
    await welcomed;
    const second = await server.connection(2);
    await client.requestBudget(); // a round trip: anything resent would be before it
    assert.equal(second.of("rpc").length, 0, "an RPC is not idempotent: not resent");
  } finally {
    await rig.cleanup();
  }
});

test("an rpc with a bad method is refused before the socket", async () => {
  const rig = await connectedRig();
  try {
    for (const method of ["", "m".repeat(129), 7 as unknown as string]) {
      const r = await settle(rig.client.rpc(method));
      assert.equal(r.ok, false);
      assert.equal((r as { error: TidegateError }).error.code, "bad_request");
    }
    await rig.sync();
    assert.equal(rig.conn.of("rpc").length, 0);
  } finally {
    await rig.cleanup();
  }
});

// ------------------------------------------------------------ tokenless ---

test("a client without a token offers only the subprotocol, and connects", async () => {
  const server = await FakeServer.start();
  const client = tokenless(server, new FakeClock());
  try {
    const welcome = await client.connect();
    assert.equal(welcome.type, "welcome");
    const hs = await server.handshake(1);
    assert.deepEqual(hs.protocols, ["tidegate.v1"]);
    assert.equal(hs.token, undefined);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a tokenless client reconnects after 4001 (the connect hook decides again)", async () => {
  const server = await FakeServer.start();
  const clock = new FakeClock();
  const client = tokenless(server, clock);
  try {
    await client.connect();
    const conn = await server.connection(1);
    const closed = nextEvent(client, "close");
    conn.close(4001, "expired");
    const c = await closed;
    assert.ok(c.reconnect, "not terminal: no token to lack");
    clock.advance(c.reconnect.delayMs);
    await server.connection(2);
    assert.deepEqual(server.handshakes[1]!.protocols, ["tidegate.v1"]);
  } finally {
    client.close();
    await server.stop();
  }
  const plan = (hasToken: boolean) =>
    planReconnect({ code: 4001, wasOpen: true, step: 0, hasGetToken: false, hasToken }, SETTINGS, () => 0);
  assert.equal(plan(true).terminal?.code, "unauthorized");
  assert.equal(plan(false).terminal, undefined);
});

// ------------------------------------------------ handshake refusals ---

test("a connect hook's 403 ends the attempt with its code and message", async () => {
  for (const code of ["session_expired", "forbidden_origin"]) {
    const server = await FakeServer.start();
    server.refusals.push({ status: 403, code });
    const clock = new FakeClock();
    const client = tokenless(server, clock);
    try {
      const errorEvent = nextEvent(client, "error");
      const r = await settle(client.connect());
      assert.equal(r.ok, false);
      const e = (r as { error: TidegateError }).error;
      assert.ok(e instanceof TidegateError);
      assert.equal(e.code, code);
      assert.equal(e.status, 403);
      assert.equal(e.message, "refused by the fake server");
      assert.equal((await errorEvent).code, code);
      assert.equal(client.state, "closed");
      clock.advance(120_000);
      assert.equal(server.handshakes.length, 1, "no second attempt");
    } finally {
      client.close();
      await server.stop();
    }
  }
  const banned = planReconnect(
    { code: 1006, wasOpen: false, refusal: { status: 403, code: "banned" }, step: 0, hasGetToken: false },
    SETTINGS,
    () => 0,
  );
  assert.equal(banned.terminal, undefined, "a ban still retries");
  const proxy = planReconnect(
    { code: 1006, wasOpen: false, refusal: { status: 403 }, step: 0, hasGetToken: false },
    SETTINGS,
    () => 0,
  );
  assert.equal(proxy.terminal, undefined, "a proxy's 403 without the broker's code is retried");
});

test("503 hook_unavailable is reported as temporary and retried after Retry-After", async () => {
  const server = await FakeServer.start();
  server.refusals.push({ status: 503, code: "hook_unavailable", retryAfterSec: 4 });
  const clock = new FakeClock();
  const client = tokenless(server, clock);
  try {
    const errorEvent = nextEvent(client, "error");
    const closed = nextEvent(client, "close");
    const connected = client.connect({ timeoutMs: 60_000 });
    const e = await errorEvent;
    assert.equal(e.code, "hook_unavailable");
    assert.equal(e.temporary, true);
    assert.equal(e.retryAfterMs, 4000);
    const c = await closed;
    assert.ok(c.reconnect!.delayMs >= 4000, `waits Retry-After (${c.reconnect!.delayMs})`);
    clock.advance(3999);
    assert.equal(server.handshakes.length, 1);
    clock.advance(c.reconnect!.delayMs - 3999);
    await connected;
    assert.equal(server.handshakes.length, 2);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a subscribe the hook refuses rejects with the hook's code and message", async () => {
  const rig = await connectedRig();
  try {
    rig.server.script = (conn, f) => {
      if (f.type === "subscribe" && f.channel === "doc:secret") {
        conn.send({ type: "error", id: f.id, code: "not_a_member", message: "ask the owner", channel: f.channel });
      } else conn.answer(f);
    };
    const r = await settle(rig.client.subscribe("doc:secret", () => undefined));
    const e = (r as { error: TidegateError }).error;
    assert.equal(e.code, "not_a_member");
    assert.equal(e.message, "ask the owner");
    assert.equal(e.channel, "doc:secret");
    assert.equal(rig.client.subscription("doc:secret"), undefined);
  } finally {
    await rig.cleanup();
  }
});

// ------------------------------------------------- server-side channels ---

test("the welcome's channels are subscriptions: seq, messages, handlers added later, no subscribe frame", async () => {
  const server = await FakeServer.start();
  server.welcomeExtra = { channels: [{ channel: "user:ann", seq: 5 }, { channel: "news", seq: 0 }] };
  const clock = new FakeClock();
  const client = tokenless(server, clock);
  try {
    await client.connect();
    const conn = await server.connection(1);
    const sub = client.subscription("user:ann");
    assert.ok(sub);
    assert.equal(sub.server, true);
    assert.equal(sub.live, true);
    assert.equal(sub.seq, 5);
    assert.equal(client.lastSeq("news"), 0);

    const events: number[] = [];
    client.on("message", (m) => events.push(m.seq));
    conn.send({ type: "message", channel: "user:ann", seq: 6, data: { n: 6 } });
    await client.requestBudget(); // 6 has arrived, before any handler
    const got: number[] = [];
    const added = await client.subscribe("user:ann", (_d, m) => got.push(m.seq));
    assert.deepEqual(added, { channel: "user:ann", seq: 5 });
    conn.send({ type: "message", channel: "user:ann", seq: 7, data: { n: 7 } });
    conn.send({ type: "message", channel: "user:ann", seq: 5, data: { n: 5 } }); // at or below the position
    await client.requestBudget();
    assert.deepEqual(events, [6, 7]);
    assert.deepEqual(got, [7]);
    assert.equal(sub.seq, 7);
    assert.equal(conn.of("subscribe").length, 0, "the client never subscribed itself");
  } finally {
    client.close();
    await server.stop();
  }
});

test("after a reconnect the new welcome decides: a gap is reported, an unlisted one is dropped", async () => {
  const server = await FakeServer.start();
  server.welcomeExtra = { channels: [{ channel: "user:ann", seq: 5 }, { channel: "news", seq: 1 }] };
  const clock = new FakeClock();
  const client = tokenless(server, clock);
  try {
    await client.connect();
    const conn = await server.connection(1);
    const got: number[] = [];
    await client.subscribe("doc:1", () => undefined); // the app's own
    await client.subscribe("user:ann", (_d, m) => got.push(m.seq));
    conn.send({ type: "message", channel: "user:ann", seq: 6, data: {} });
    await client.requestBudget();

    server.welcomeExtra = { channels: [{ channel: "user:ann", seq: 9 }] };
    const gap = nextEvent(client, "gap");
    const closed = nextEvent(client, "close");
    conn.close(1012, "restart");
    clock.advance((await closed).reconnect!.delayMs);
    assert.deepEqual(await gap, { channel: "user:ann", since: 6, seq: 9 });
    const second = await server.connection(2);
    await second.waitFor((f) => f.type === "subscribe" && f.channel === "doc:1");
    await client.requestBudget();
    assert.deepEqual(
      second.of("subscribe").map((f) => f.channel),
      ["doc:1"],
      "only the app's own channel is subscribed again",
    );
    assert.equal(client.subscription("news"), undefined, "no longer listed, no handler: gone");
    assert.equal(client.subscription("user:ann")?.seq, 9);
    second.send({ type: "message", channel: "user:ann", seq: 10, data: {} });
    await client.requestBudget();
    assert.deepEqual(got, [6, 10]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("an app's subscribe waiting for the welcome is answered by the welcome when the broker joined it", async () => {
  const server = await FakeServer.start();
  server.welcomeExtra = { channels: ["user:ann"] };
  const client = tokenless(server, new FakeClock());
  try {
    const ready = client.subscribe("user:ann", () => undefined);
    await client.connect();
    const r = await ready;
    assert.equal(r.channel, "user:ann");
    assert.equal(r.seq, undefined, "the welcome named no position");
    const conn = await server.connection(1);
    await client.requestBudget();
    assert.equal(conn.of("subscribe").length, 0);
    assert.equal(client.subscription("user:ann")?.server, true);
  } finally {
    client.close();
    await server.stop();
  }
});

// ------------------------------------------------------------- expiry ---

test("an expiry frame moves the known expiry and sends nothing", async () => {
  const server = await FakeServer.start();
  const first = Date.now() + 60_000;
  server.tokenExpiresAt = first;
  const clock = new FakeClock();
  const client = tokenless(server, clock);
  try {
    assert.equal((await client.connect()).tokenExpiresAt, first);
    const conn = await server.connection(1);
    const extended = nextEvent(client, "expiry");
    conn.send({ type: "expiry", tokenExpiresAt: first + 3_600_000 });
    assert.deepEqual(await extended, { tokenExpiresAt: first + 3_600_000 });
    assert.equal(client.welcome?.tokenExpiresAt, first + 3_600_000);
    clock.advance(3_000_000);
    await client.requestBudget();
    assert.equal(conn.of("refresh").length, 0, "no token to refresh");
  } finally {
    client.close();
    await server.stop();
  }
});

// ---------------------------------------------------------------- SSE ---

test("over SSE a client without a token sends no Authorization, and reads the hook's refusal", async () => {
  const seen: Array<Record<string, string> | undefined> = [];
  const fetch: FetchLike = async (_url, init) => {
    seen.push(init.headers);
    const body = JSON.stringify({ error: "session_expired", message: "log in again" });
    return { status: 403, headers: { get: () => null }, body: null, text: async () => body };
  };
  const closed = await new Promise<TransportClose>((resolve) => {
    const t = sseTransport(fetch)("ws://127.0.0.1:1/v1/ws", ["tidegate.v1"], {
      open: () => undefined,
      message: () => undefined,
      close: resolve,
    });
    void t;
  });
  assert.equal(seen.length, 1);
  assert.equal(seen[0]!["Authorization"], undefined);
  assert.equal(seen[0]!["Accept"], "text/event-stream");
  assert.deepEqual(closed.refusal, { status: 403, code: "session_expired", message: "log in again", retryAfterMs: undefined });
  const e = planReconnect(
    { code: closed.code, wasOpen: false, refusal: closed.refusal, step: 0, hasGetToken: false, hasToken: false },
    SETTINGS,
    () => 0,
  );
  assert.deepEqual(e.terminal, { code: "session_expired", message: "log in again" });
});

test("a resubscribe the backend cannot answer (hook_unavailable) is kept and asked again after retryAfterMs", async () => {
  const rig = await connectedRig();
  const { client, conn, server, clock } = rig;
  try {
    await client.subscribe("doc:1", () => undefined);
    let refusals = 1;
    server.script = (c, f) => {
      if (f.type === "subscribe" && c !== conn && refusals > 0) {
        refusals -= 1;
        c.send({ type: "error", id: f.id, code: "hook_unavailable", message: "breaker open", retryAfterMs: 3000 });
      } else c.answer(f);
    };
    const refused = nextEvent(client, "error", (e) => e.code === "hook_unavailable");
    const closed = nextEvent(client, "close");
    conn.close(1012, "restart");
    clock.advance((await closed).reconnect!.delayMs);
    const second = await server.connection(2);
    const e = await refused;
    assert.equal(e.channel, "doc:1");
    assert.equal(e.temporary, true);
    assert.ok(client.subscription("doc:1"), "still wanted");
    await client.requestBudget();
    clock.advance(2999);
    await client.requestBudget();
    assert.equal(second.of("subscribe").length, 1, "not before retryAfterMs");
    clock.advance(1000); // + the jitter (random 0.5: 500 ms)
    await second.waitFor((f) => f.type === "subscribe", 1);
    await client.requestBudget();
    assert.equal(client.subscription("doc:1")?.live, true);
  } finally {
    await rig.cleanup();
  }
});
