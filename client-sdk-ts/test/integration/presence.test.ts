/**
 * Presence in the SDK (PROTOCOL.md §13) against a real broker: reads,
 * `join`/`leave` events from the diffs, and a member set that is re-read
 * after a reconnect, firing the joins and leaves missed meanwhile.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { brokerConfig, merge, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { DropProxy } from "../helpers/proxy.js";
import { nextEvent, until } from "../helpers/events.js";
import type { MemberEvent } from "../../src/presence.js";

let broker: Broker;
let proxy: DropProxy;
const viaProxy = sdkClients(() => proxy.wsUrl);
const direct = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(brokerConfig(TEST_BASE));
  proxy = await DropProxy.start(broker.port);
});

after(async () => {
  viaProxy.closeAll();
  direct.closeAll();
  await proxy?.stop();
  await broker?.stop();
});

const tokenFor = (account: string) =>
  broker.token({ account, sub: "note:*", pub: "note:*", info: { name: account.toUpperCase() } });

test("reads and join/leave events keep subscription.members current", async () => {
  const a = direct.make({ token: await tokenFor("ann") });
  await a.connect();
  const joins: MemberEvent[] = [];
  const leaves: MemberEvent[] = [];
  a.on("join", (e) => joins.push(e));
  a.on("leave", (e) => leaves.push(e));
  await a.subscribe("note:sdk1", () => undefined, { presence: true });
  const members = () => [...(a.subscription("note:sdk1")?.members.values() ?? [])].map((m) => m.user).sort();
  await until(() => members().join() === "ann", "ann's own membership");

  const b = direct.make({ token: await tokenFor("bob") });
  await b.connect();
  await b.subscribe("note:sdk1", () => undefined);
  await until(() => members().join() === "ann,bob", "bob joined");
  const bob = joins.find((e) => e.member.user === "bob")!;
  assert.deepEqual(bob.member.info, { name: "BOB" });

  const read = await a.presence("note:sdk1");
  assert.deepEqual(read.members.map((m) => m.user), ["ann", "bob"]);
  assert.equal(read.connections, 2);
  const stats = await a.presenceStats("note:sdk1");
  assert.deepEqual([stats.users, stats.connections], [2, 2]);

  b.close();
  await until(() => members().join() === "ann", "bob left");
  assert.deepEqual(leaves.map((e) => e.member.user), ["bob"]);
  await assert.rejects(a.presence("doc:1"), (e: { code: string }) => e.code === "forbidden");
  a.close();
});

test("after a reconnect the member set is read again and the missed joins and leaves fire", async () => {
  const watcher = viaProxy.make({ token: await tokenFor("wat") });
  await watcher.connect();
  const events: string[] = [];
  watcher.on("join", (e) => events.push(`join ${e.member.user}`));
  watcher.on("leave", (e) => events.push(`leave ${e.member.user}`));
  const early = direct.make({ token: await tokenFor("early") });
  await early.connect();
  await early.subscribe("note:sdk2", () => undefined);
  await watcher.subscribe("note:sdk2", () => undefined, { presence: true });
  const users = () =>
    [...(watcher.subscription("note:sdk2")?.members.values() ?? [])].map((m) => m.user).sort().join();
  await until(() => users() === "early,wat", "the first read");

  // The watcher drops off; meanwhile one member leaves and another joins.
  proxy.refuse = true;
  const down = nextEvent(watcher, "state", (s) => s.state === "reconnecting");
  proxy.dropAll();
  await down;
  events.length = 0;
  early.close();
  const late = direct.make({ token: await tokenFor("late") });
  await late.connect();
  await late.subscribe("note:sdk2", () => undefined);
  proxy.refuse = false;

  await until(() => users() === "late,wat", `the set after the reconnect (${users()})`, 15_000);
  assert.ok(events.includes("leave early"), events.join("; "));
  assert.ok(events.includes("join late"), events.join("; "));
  watcher.close();
  late.close();
});
