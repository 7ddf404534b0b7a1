/**
 * Account-level limits against the real broker: the connection cap (429 +
 * Retry-After before the upgrade) and the account message budget (close
 * 1008 with account_rate_limited).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { TidegateError } from "../../src/errors.js";
import { brokerConfig, merge, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { nextEvent } from "../helpers/events.js";

let broker: Broker;
const clients = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(
    brokerConfig(
      merge(TEST_BASE, {
        "plans.free": {
          max_connections: 2,
          messages_per_sec: 200,
          burst: 200,
          account_messages_per_sec: 5,
          account_burst: 10,
          account_sample_every: 1,
        },
      }),
    ),
  );
});

after(async () => {
  clients.closeAll();
  await broker?.stop();
});

const client = clients.make;

test("over the account's connection cap, the handshake 429 is read and Retry-After is honoured", async () => {
  const token = await broker.token({ account: "capped" });
  const a = client({ token });
  const b = client({ token });
  await Promise.all([a.connect(), b.connect()]);
  const c = client({ token });
  const errors: TidegateError[] = [];
  c.on("error", (e) => errors.push(e));
  const refused = nextEvent(c, "close");
  const welcomed = nextEvent(c, "welcome");
  void c.connect().catch(() => undefined);
  const outcome = await Promise.race([refused, welcomed.then(() => "welcome" as const)]);
  assert.notEqual(
    outcome,
    "welcome",
    "the broker accepted a third socket with max_connections = 2 (account connection cap not enforced)",
  );
  const close = await refused;
  assert.equal(close.wasOpen, false);
  assert.equal(close.refusal?.status, 429);
  assert.equal(close.refusal?.code, "too_many_connections");
  const retryAfter = close.refusal?.retryAfterMs ?? 0;
  assert.ok(retryAfter > 0, "the broker sent Retry-After");
  assert.ok(close.reconnect!.delayMs >= retryAfter, "waits at least Retry-After");
  assert.equal(errors[0]?.code, "too_many_connections");
  c.close();
  a.close();
  b.close();
});

test("an account over its message budget is closed with 1008; the SDK surfaces account_rate_limited and backs off long", async () => {
  const c = client({
    token: await broker.token({ account: "flooder" }),
    pacing: false,
    accountLimitedDelayMs: 60_000,
  });
  await c.connect();
  const errors: TidegateError[] = [];
  c.on("error", (e) => errors.push(e));
  const closed = nextEvent(c, "close", (e) => e.code === 1008, 10_000);
  const publishes = Array.from({ length: 40 }, (_, i) => c.publish("doc:flood", i).catch((e) => e));
  const all = Promise.all(publishes);
  const outcome = await Promise.race([closed, all.then(() => "settled" as const)]);
  if (outcome === "settled") {
    const acked = (await all).filter((r) => typeof r.seq === "number").length;
    assert.ok(
      acked < 40,
      `the broker acked all 40 publishes against an account budget of 10 (burst) + 5/s without closing 1008`,
    );
  }
  const close = await closed;
  assert.ok(errors.some((e) => e.code === "account_rate_limited"));
  assert.ok(close.reconnect!.delayMs >= 60_000, "long backoff after 1008");
  assert.equal(c.state, "reconnecting");
  c.close();
  const settled = await Promise.all(publishes);
  assert.ok(
    settled.every((r) => typeof r.seq === "number" || ["disconnected", "closed", "rate_limited"].includes(r.code)),
    "every publish settled with an ack or a typed error",
  );
});

test("paced by the SDK, the same account budget is never exceeded: no 1008, every publish acked", async () => {
  const c = client({ token: await broker.token({ account: "polite" }) });
  await c.connect();
  const closes: number[] = [];
  c.on("close", (e) => closes.push(e.code));
  const limited: unknown[] = [];
  c.on("rateLimited", (e) => limited.push(e));
  // Budget 10 + 5/s; at 90% the SDK sends 9 at once, then 4.5/s: 15 take ~1.3 s.
  const results = await Promise.all(Array.from({ length: 15 }, (_, i) => c.publish("doc:polite", i)));
  assert.equal(results.length, 15);
  assert.ok(results.every((r) => r.seq > 0 && r.attempts === 1));
  assert.deepEqual(closes, []);
  assert.deepEqual(limited, []);
  assert.equal(c.state, "connected");
  c.close();
});
