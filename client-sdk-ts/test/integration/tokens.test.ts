/**
 * Tokens that expire, against the real broker (PROTOCOL.md §2, §4): the
 * SDK keeps a socket open past its first token's `exp` by sending fresh
 * ones from `getToken()` on the socket (`refresh`), and when it cannot,
 * the broker closes with 4001 and the SDK reconnects with a fresh token.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { CloseEvent } from "../../src/types.js";
import { brokerConfig, brokerForFile, TEST_BASE } from "../helpers/broker.js";
import { nextEvent, until } from "../helpers/events.js";

const { broker, clients } = brokerForFile(() => brokerConfig(TEST_BASE));

test("short-lived tokens are refreshed on the socket: no 4001, no reconnect", async () => {
  let calls = 0;
  const c = clients.make({
    getToken: () => {
      calls += 1;
      return broker().token({ account: "refresher", ttl: 4 });
    },
  });
  const closes: CloseEvent[] = [];
  c.on("close", (e) => closes.push(e));
  const welcome = await c.connect();
  const first = welcome.tokenExpiresAt!;
  assert.ok(first > Date.now() && first <= Date.now() + 5_000, `tokenExpiresAt ${first}`);
  // Past the first token's exp, and the next one's: still the same socket.
  const refreshed = await nextEvent(c, "tokenRefresh", () => true, 10_000);
  assert.ok(refreshed.tokenExpiresAt > first, "the ack carries the new exp");
  await until(() => Date.now() > first + 2_500, "the first token's exp to pass", 10_000);
  await nextEvent(c, "tokenRefresh", (r) => r.tokenExpiresAt > refreshed.tokenExpiresAt, 10_000);
  assert.ok(Date.now() > first, "the first token has expired by now");
  assert.deepEqual(closes, [], "the socket was never closed");
  assert.equal(c.welcome?.connId, welcome.connId);
  const budget = await c.requestBudget();
  assert.equal(budget.type, "budget");
  assert.ok(calls >= 3, `getToken() was asked ${calls} times`);
});

test("when a refresh cannot happen the broker closes with 4001 and the SDK reconnects with a fresh token", async () => {
  let calls = 0;
  const c = clients.make({
    getToken: () => {
      calls += 1;
      // The first token lives 2 s; the refresh attempt fails; later ones last.
      if (calls === 2) throw new Error("the token service is down");
      return broker().token({ account: "expirer", ttl: calls === 1 ? 2 : 600 });
    },
  });
  const first = await c.connect();
  const close = await nextEvent(c, "close", () => true, 10_000);
  assert.equal(close.code, 4001);
  assert.ok(close.reconnect, "it reconnects");
  const second = await nextEvent(c, "welcome", () => true, 10_000);
  assert.notEqual(second.connId, first.connId);
  assert.ok(second.tokenExpiresAt! > Date.now() + 500_000, "with the fresh, long token");
  assert.equal(calls, 3);
});
