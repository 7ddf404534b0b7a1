/**
 * Tokens that expire (PROTOCOL.md §2, §4): the SDK sends a fresh token from
 * `getToken()` on the open socket before `welcome.tokenExpiresAt`, reconnects
 * with a fresh one after 4001, forgets a subscription the refreshed token no
 * longer allows, and caps any wait the server asks for. Against the fake
 * server, on a fake clock.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { ClientOptions } from "../../src/types.js";
import { FakeClock, FakeServer } from "../helpers/setup.js";
import { nextEvent } from "../helpers/events.js";

interface Rig {
  server: FakeServer;
  clock: FakeClock;
  client: TidegateClient;
}

/** A fake server set up by `prepare`, and a client on a fake clock. */
async function run(
  options: Partial<ClientOptions>,
  prepare: (server: FakeServer) => void,
  body: (rig: Rig) => Promise<void>,
): Promise<void> {
  const server = await FakeServer.start();
  prepare(server);
  const clock = new FakeClock();
  const client = new TidegateClient({
    transport: "websocket",
    url: server.url,
    WebSocket,
    clock,
    random: () => 0,
    ...options,
  } as ClientOptions);
  try {
    await body({ server, clock, client });
  } finally {
    client.close();
    await server.stop();
  }
}

test("the token is refreshed on the socket before it expires, without reconnecting", () => {
  const expires = Date.now() + 100_000;
  let calls = 0;
  return run(
    { getToken: async () => `token-${++calls}` },
    (server) => {
      server.tokenExpiresAt = expires;
      server.refreshedExpiresAt = expires + 3_600_000;
    },
    async ({ server, clock, client }) => {
      const welcome = await client.connect();
      assert.equal(welcome.tokenExpiresAt, expires);
      const conn = await server.connection(1);
      // 100 s to live: refreshed 30 s before exp (earlier than 80 s).
      clock.advance(69_000);
      assert.equal(conn.frames.filter((f) => f.type === "refresh").length, 0, "not yet");
      const refreshed = nextEvent(client, "tokenRefresh");
      clock.advance(1_000);
      const frame = await conn.waitFor((f) => f.type === "refresh");
      assert.equal(frame.token, "token-2");
      assert.equal(typeof frame.id, "number");
      assert.deepEqual(await refreshed, { tokenExpiresAt: server.refreshedExpiresAt });
      assert.equal(client.welcome?.tokenExpiresAt, server.refreshedExpiresAt);
      assert.equal(server.conns.length, 1, "no reconnect");
      // The next refresh follows the new expiry (~an hour: at 80% of it).
      clock.advance(2_800_000);
      assert.equal(conn.frames.filter((f) => f.type === "refresh").length, 1);
      clock.advance(200_000);
      await conn.waitFor((f) => f.type === "refresh" && f.id !== frame.id);
    },
  );
});

test("a refused refresh is reported and tried again while the token lasts", () =>
  run(
    { getToken: async () => "t" },
    (server) => {
      server.tokenExpiresAt = Date.now() + 100_000;
      server.script = (c, frame) => {
        if (frame.type === "refresh" && c.frames.filter((f) => f.type === "refresh").length === 1) {
          c.send({ type: "error", code: "bad_request", id: frame.id, message: "refresh refused" });
        } else c.answer(frame);
      };
    },
    async ({ server, clock, client }) => {
      await client.connect();
      const conn = await server.connection(1);
      const error = nextEvent(client, "error");
      clock.advance(70_000);
      assert.equal((await error).code, "bad_request");
      const first = await conn.waitFor((f) => f.type === "refresh");
      // About 30 s are left: the next attempt is at half of that.
      clock.advance(16_000);
      const second = await conn.waitFor((f) => f.type === "refresh" && f.id !== first.id);
      assert.equal(second.token, "t");
    },
  ));

test("without getToken nothing is refreshed, and 4001 stops the client", () =>
  run(
    { token: "fixed" },
    (server) => {
      server.tokenExpiresAt = Date.now() + 100_000;
    },
    async ({ server, clock, client }) => {
      await client.connect();
      const conn = await server.connection(1);
      clock.advance(99_000);
      assert.equal(conn.frames.filter((f) => f.type === "refresh").length, 0);
      const close = nextEvent(client, "close");
      const error = nextEvent(client, "error");
      conn.close(4001, "token expired: reconnect with a new token");
      assert.equal((await close).reconnect, null);
      assert.equal((await error).code, "unauthorized");
      assert.equal(client.state, "closed");
    },
  ));

test("after 4001 the client reconnects with a fresh token from getToken()", () => {
  let calls = 0;
  return run(
    { getToken: async () => `token-${++calls}` },
    () => undefined,
    async ({ server, clock, client }) => {
      await client.connect();
      const conn = await server.connection(1);
      const close = nextEvent(client, "close");
      conn.close(4001, "token expired: reconnect with a new token");
      const c = await close;
      assert.equal(c.code, 4001);
      clock.advance(c.reconnect!.delayMs);
      await server.connection(2);
      assert.deepEqual(
        server.handshakes.map((h) => h.token),
        ["token-1", "token-2"],
      );
    },
  );
});

test("a subscription the refreshed token no longer allows is forgotten", () =>
  run(
    { getToken: async () => "t" },
    () => undefined,
    async ({ server, clock, client }) => {
      await client.connect();
      const conn = await server.connection(1);
      await client.subscribe("chat:1", () => undefined);
      await client.subscribe("doc:1", () => undefined);
      const error = nextEvent(client, "error");
      conn.send({ type: "error", code: "forbidden", channel: "chat:1", message: "the subscription ended" });
      const e = await error;
      assert.deepEqual([e.code, e.channel], ["forbidden", "chat:1"]);
      // After a reconnect only doc:1 is subscribed again.
      const close = nextEvent(client, "close");
      conn.close(1012, "restart");
      clock.advance((await close).reconnect!.delayMs);
      const conn2 = await server.connection(2);
      const sub = await conn2.waitFor((f) => f.type === "subscribe");
      assert.equal(sub.channel, "doc:1");
      // A round trip after the resubscribes: everything sent before it is in.
      await client.requestBudget();
      const again = conn2.frames.filter((f) => f.type === "subscribe").map((f) => f.channel);
      assert.deepEqual(again, ["doc:1"], "chat:1 was not subscribed again");
    },
  ));

test("a rate_limited frame asking for an hour pauses the client for at most the cap", () =>
  run(
    { token: "t", maxRetryAfterMs: 2_000 },
    (server) => {
      let limitedOnce = false;
      server.script = (c, frame) => {
        if (frame.type === "publish" && !limitedOnce) {
          limitedOnce = true;
          c.send({ type: "error", code: "rate_limited", retryAfterMs: 3_600_000, dropped: 1, ids: [frame.id] });
        } else c.answer(frame);
      };
    },
    async ({ server, clock, client }) => {
      await client.connect();
      const limited = nextEvent(client, "rateLimited");
      const published = client.publish("doc:1", "first");
      assert.equal((await limited).retryAfterMs, 2_000);
      clock.advance(2_000);
      const { attempts } = await published;
      assert.equal(attempts, 2, "resent after the capped wait");
    },
  ));
