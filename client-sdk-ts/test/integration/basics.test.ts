/** The SDK against the real broker built from this repo (default limits). */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Json } from "../../src/types.js";
import { brokerConfig, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { DropProxy } from "../helpers/proxy.js";
import { nextEvent, settle } from "../helpers/events.js";

let broker: Broker;
const clients = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(brokerConfig(TEST_BASE));
});

after(async () => {
  clients.closeAll();
  await broker?.stop();
});

const client = clients.make;

test("connects with the bearer subprotocol and gets the welcome limits from the config", async () => {
  const c = client({ token: await broker.token({}) });
  const opened = nextEvent(c, "open");
  const welcome = await c.connect();
  assert.equal((await opened).protocol, "tidegate.v1");
  assert.equal(welcome.account, "acme");
  assert.deepEqual(
    { ...welcome.limits },
    {
      ...welcome.limits,
      messagesPerSec: 20,
      burst: 20,
      maxPayloadBytes: 65536,
      maxSubscriptions: 100,
      accountMessagesPerSec: 100,
      accountBurst: 200,
      maxConnections: 8,
    },
  );
  c.close();
});

test("a message published over HTTP reaches a subscriber with its seq", async () => {
  const c = client({ token: await broker.token({}) });
  await c.connect();
  const got: Array<{ data: Json; seq: number }> = [];
  const ack = await c.subscribe("doc:http", (data, { seq }) => got.push({ data, seq }));
  assert.equal(ack.channel, "doc:http");
  const message = nextEvent(c, "message");
  const res = await broker.publish("doc:http", { hello: "world" });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  await message;
  assert.deepEqual(got, [{ data: { hello: "world" }, seq: res.body.seq }]);
  c.close();
});

test("a publish from the SDK is acked with a seq and delivered to another client", async () => {
  const token = await broker.token({});
  const a = client({ token });
  const b = client({ token });
  await Promise.all([a.connect(), b.connect()]);
  const seen = new Promise<{ data: Json; seq: number }>((resolve) =>
    void b.subscribe("doc:pair", (data, { seq }) => resolve({ data, seq })),
  );
  await b.subscribe("doc:pair", () => undefined);
  const { seq, attempts } = await a.publish("doc:pair", { n: 1 });
  assert.ok(seq > 0);
  assert.equal(attempts, 1);
  assert.deepEqual(await seen, { data: { n: 1 }, seq });
  a.close();
  b.close();
});

test("a publish outside the token's pub_channels rejects with forbidden; the socket stays open", async () => {
  const c = client({ token: await broker.token({ pub: "doc:*" }) });
  await c.connect();
  const r = await settle(c.publish("other:1", 1));
  assert.ok(!r.ok);
  assert.equal(r.error.code, "forbidden");
  assert.equal(r.error.temporary, false);
  const ok = await c.publish("doc:still-open", 2);
  assert.ok(ok.seq > 0);
  assert.equal(c.state, "connected");
  c.close();
});

test("a refused token (401) makes the SDK ask getToken() again, and the next token connects", async () => {
  const good = await broker.token({});
  const tokens = ["not-a-jwt", good];
  let calls = 0;
  const c = client({ getToken: () => tokens[Math.min(calls++, 1)]! });
  const refused = nextEvent(c, "close");
  await c.connect();
  const close = await refused;
  assert.equal(close.refusal?.status, 401);
  assert.equal(close.refusal?.code, "unauthorized");
  assert.equal(calls, 2);
  c.close();
});

test("requestBudget returns the connection and account budgets", async () => {
  const c = client({ token: await broker.token({}) });
  await c.connect();
  const budget = await c.requestBudget();
  assert.equal(budget.type, "budget");
  assert.equal(budget.connection?.capacity, 20);
  assert.ok(budget.connection!.remaining <= 20 && budget.connection!.remaining >= 0);
  assert.ok(budget.account, `the budget frame has no \`account\` part (PROTOCOL.md §3): ${JSON.stringify(budget)}`);
  assert.equal(budget.account.capacity, 200);
  c.close();
});

test("a payload above maxPayloadBytes is refused locally instead of costing the socket (1009)", async () => {
  const c = client({ token: await broker.token({}) });
  await c.connect();
  const r = await settle(c.publish("doc:big", "x".repeat(70_000)));
  assert.equal(!r.ok && r.error.code, "payload_too_large");
  assert.equal(c.state, "connected");
  assert.ok((await c.publish("doc:big", "small")).seq > 0);
  c.close();
});

test("after a network drop it reconnects, resubscribes with since and recovers what it missed, in order", async () => {
  const proxy = await DropProxy.start(broker.port);
  try {
    const c = client({ url: proxy.wsUrl, token: await broker.token({}) });
    await c.connect();
    const got: number[] = [];
    await c.subscribe("doc:recover", (data) => got.push((data as { n: number }).n));
    const first = nextEvent(c, "message");
    await broker.publish("doc:recover", { n: 1 });
    await first;

    proxy.refuse = true;
    const dropped = nextEvent(c, "close");
    proxy.dropAll();
    const close = await dropped;
    assert.equal(close.wasOpen, true);
    assert.ok(close.reconnect && close.reconnect.delayMs < 400);
    for (const n of [2, 3, 4]) assert.equal((await broker.publish("doc:recover", { n })).status, 200);

    const gaps: unknown[] = [];
    c.on("gap", (g) => gaps.push(g));
    proxy.refuse = false;
    await nextEvent(c, "message", (m) => (m.data as { n: number }).n === 4, 10_000);
    const live = nextEvent(c, "message", (m) => (m.data as { n: number }).n === 5);
    await broker.publish("doc:recover", { n: 5 });
    await live;
    assert.deepEqual(got, [1, 2, 3, 4, 5], "recovered in order, no duplicates");
    assert.deepEqual(gaps, []);
    c.close();
  } finally {
    await proxy.stop();
  }
});
