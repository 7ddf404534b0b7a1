/**
 * No silent loss (PROTOCOL.md §11): a subscriber made slow on purpose (a
 * proxy stops reading what the broker sends) loses messages at the broker,
 * is told with `slow_consumer`, and the SDK recovers them from history with
 * `since`: the app ends with every message, in order, once, with no code
 * beyond `subscribe`. A conflating channel's supersession is not a gap.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Json } from "../../src/types.js";
import { brokerConfig, merge, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { DropProxy } from "../helpers/proxy.js";
import { nextEvent, until } from "../helpers/events.js";
import { publishBatches, SLOW_READER } from "../helpers/slow.js";

let broker: Broker;
let proxy: DropProxy;
const clients = sdkClients(() => proxy.wsUrl);

before(async () => {
  broker = await startBroker(brokerConfig(merge(TEST_BASE, SLOW_READER)));
  proxy = await DropProxy.start(broker.port);
});

after(async () => {
  clients.closeAll();
  await proxy?.stop();
  await broker?.stop();
});

test("a subscriber made slow on purpose ends with every message of a queue channel, in order, once", async () => {
  const c = clients.make({ token: await broker.token({}) });
  await c.connect();
  const got: number[] = [];
  const gaps: unknown[] = [];
  c.on("gap", (g) => gaps.push(g));
  await c.subscribe("doc:slow", (data: Json) => got.push((data as { i: number }).i));

  proxy.pauseDownstream();
  const n = 2000;
  const slow = nextEvent(c, "slowConsumer", () => true, 30_000);
  const pad = "p".repeat(500);
  await publishBatches(broker, "doc:slow", n, (i) => ({ i, pad }));
  proxy.resumeDownstream();

  const { dropped } = await slow;
  assert.ok(dropped > 0, "the broker dropped some and said so");
  await until(() => got.length >= n, `${n} messages (have ${got.length})`, 30_000);
  assert.deepEqual(got, Array.from({ length: n }, (_, i) => i), "every message, in order, once");
  assert.deepEqual(gaps, [], "history covered the hole: no gap");
  c.close();
});

test("a reconnect resumes from the ack's position even before the first message", async () => {
  const c = clients.make({ token: await broker.token({}) });
  await c.connect();
  const got: Json[] = [];
  const ack = await c.subscribe("doc:quiet", (data) => got.push(data));
  assert.equal(typeof ack.seq, "number", "the ack tells the position");
  assert.equal(c.lastSeq("doc:quiet"), ack.seq);

  proxy.refuse = true;
  const down = nextEvent(c, "state", (s) => s.state === "reconnecting");
  proxy.dropAll();
  await down;
  // Published while the client is away: recovered with `since`.
  await broker.publish("doc:quiet", "while away");
  proxy.refuse = false;
  await until(() => got.length === 1, "the message published while away", 10_000);
  assert.deepEqual(got, ["while away"]);
  c.close();
});

test("a paused reader of a conflating channel gets the last value per key and no gap", async () => {
  const token = await broker.token({ sub: "cursor:*", pub: "cursor:*" });
  const c = clients.make({ token });
  await c.connect();
  const last = new Map<string, number>();
  let flagged = 0;
  const gaps: unknown[] = [];
  c.on("gap", (g) => gaps.push(g));
  await c.subscribe("cursor:n1", (data, { conflated }) => {
    const d = data as { user: string; pos: number };
    last.set(d.user, d.pos);
    if (conflated) flagged += 1;
  });
  proxy.pauseDownstream();
  const n = 3000;
  const users = ["ada", "bob", "cy"];
  const pad = "p".repeat(600);
  await publishBatches(broker, "cursor:n1", n, (i) => ({ user: users[i % 3]!, pos: i, pad }));
  proxy.resumeDownstream();
  await until(
    () => users.every((u, k) => last.get(u) === n - 3 + k),
    "the last position of every user",
    30_000,
  );
  assert.ok(flagged > 0, "superseding messages say so");
  assert.deepEqual(gaps, []);
  c.close();
});
