/**
 * Pacing and nacks against the real broker with a low per-connection budget
 * (10/s, burst 5) and a short history (3 messages).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import type { RateLimitedEvent } from "../../src/types.js";
import { brokerConfig, merge, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { DropProxy } from "../helpers/proxy.js";
import { nextEvent, settle } from "../helpers/events.js";

let broker: Broker;
const clients = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(
    brokerConfig(
      merge(TEST_BASE, {
        "plans.free": { messages_per_sec: 10, burst: 5 },
        "plans.free.costs": { max_single: 5 },
        "accounts.acme.costs": { max_single: 5 },
        history: { size: 3 },
      }),
    ),
  );
});

after(async () => {
  clients.closeAll();
  await broker?.stop();
});

const client = clients.make;

test("the limit is real: a raw socket sending 30 frames at once gets rate_limited", async () => {
  const token = await broker.token({});
  const ws = new WebSocket(broker.wsUrl, ["tidegate.v1", `bearer.${token}`]);
  const frames: any[] = [];
  ws.on("message", (m) => frames.push(JSON.parse(m.toString())));
  await new Promise((r) => ws.once("open", r));
  for (let id = 1; id <= 30; id += 1) {
    ws.send(JSON.stringify({ type: "publish", channel: "doc:raw", data: id, id }));
  }
  const answered = new Set<number>();
  await new Promise<void>((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error(`only ${answered.size}/30 answered`)), 5000);
    const check = () => {
      for (const f of frames) {
        if (f.type === "ack" || (f.type === "error" && f.id !== undefined)) answered.add(f.id);
        if (f.type === "error" && f.code === "rate_limited") for (const id of f.ids ?? []) answered.add(id);
      }
      if (answered.size === 30) {
        clearTimeout(guard);
        resolve();
      }
    };
    ws.on("message", check);
    check();
  });
  ws.close();
  const limited = frames.filter((f) => f.type === "error" && f.code === "rate_limited");
  assert.ok(limited.length >= 1, "the broker dropped some of the burst");
  assert.ok(frames.filter((f) => f.type === "ack").length < 30);
});

test("paced by the SDK, 30 publishes at once are all acked and the server drops none", async () => {
  const c = client({ token: await broker.token({}) });
  await c.connect();
  const limited: RateLimitedEvent[] = [];
  c.on("rateLimited", (e) => limited.push(e));
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: 30 }, (_, i) => c.publish("doc:paced", { i })));
  const elapsed = Date.now() - started;
  assert.equal(results.length, 30);
  assert.ok(results.every((r) => r.attempts === 1), "nothing was resent");
  const seqs = results.map((r) => r.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), "acked in publish order");
  assert.deepEqual(limited, [], "no rate_limited frame");
  // 30 at 9/s after a burst of 4 takes about 2.9 s: the SDK waited instead of flooding.
  assert.ok(elapsed > 2000, `paced over time (${elapsed} ms)`);
  c.close();
});

test("unpaced, the server drops frames and the SDK resends exactly the listed ids until every publish settles", async () => {
  const c = client({ token: await broker.token({}), pacing: false, maxRetries: 10 });
  await c.connect();
  const limited: RateLimitedEvent[] = [];
  c.on("rateLimited", (e) => limited.push(e));
  const results = await Promise.all(
    Array.from({ length: 25 }, (_, i) => settle(c.publish("doc:nacked", { i }))),
  );
  assert.ok(limited.length >= 1, "the broker said rate_limited");
  assert.ok(limited.every((e) => e.retryAfterMs >= 0 && e.ids.length > 0));
  const ok = results.filter((r) => r.ok);
  const retried = ok.filter((r) => r.ok && r.value.attempts > 1);
  assert.ok(retried.length >= 1, "some publishes were acked after a resend");
  for (const r of results) {
    if (!r.ok) assert.equal(r.error.code, "rate_limited", "the only failure is a typed rate_limited");
  }
  assert.ok(ok.length > 5, `more than the burst got through (${ok.length})`);
  c.close();
});

test("when history no longer holds what was missed, the SDK emits a gap", async () => {
  const proxy = await DropProxy.start(broker.port);
  try {
    const c = client({ url: proxy.wsUrl, token: await broker.token({}) });
    await c.connect();
    await c.subscribe("doc:gap", () => undefined);
    const first = nextEvent(c, "message");
    await broker.publish("doc:gap", 0);
    await first;
    proxy.refuse = true;
    const dropped = nextEvent(c, "close");
    proxy.dropAll();
    await dropped;
    for (let n = 1; n <= 6; n += 1) assert.equal((await broker.publish("doc:gap", n)).status, 200);
    const gap = nextEvent(c, "gap", () => true, 10_000);
    proxy.refuse = false;
    const g = await gap;
    assert.equal(g.channel, "doc:gap");
    assert.ok(g.since >= 1);
    c.close();
  } finally {
    await proxy.stop();
  }
});
