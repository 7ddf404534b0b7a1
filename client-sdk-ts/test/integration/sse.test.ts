/**
 * `transport: "auto"` against the real broker through a proxy that refuses
 * WebSocket upgrades (test/helpers/no-upgrade-proxy.ts): the client falls
 * back to `GET /v1/sse`, keeps receiving across subscribe/unsubscribe
 * (each reopens the stream at the current position: nothing lost, nothing
 * twice), publishes over `POST /v1/client/publish`, and refuses
 * socket-only requests with `unsupported_transport`. Forced transports
 * do not switch.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Json, MessageContext } from "../../src/types.js";
import type { TidegateClient } from "../../src/client.js";
import type { FetchLike } from "../../src/transports/sse.js";
import { brokerConfig, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { NoUpgradeProxy } from "../helpers/no-upgrade-proxy.js";
import { nextEvent, until } from "../helpers/events.js";

let broker: Broker;
let proxy: NoUpgradeProxy;
const viaProxy = sdkClients(() => proxy.wsUrl);
const direct = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(brokerConfig(TEST_BASE));
  proxy = await NoUpgradeProxy.start(broker.port);
});

after(async () => {
  viaProxy.closeAll();
  direct.closeAll();
  await proxy?.stop();
  await broker?.stop();
});

const grants = { sub: ["sse:*"], pub: ["sse:*"] };

function collect(c: TidegateClient, channel: string) {
  const got: { data: Json; seq: number }[] = [];
  const ready = c.subscribe(channel, (data: Json, ctx: MessageContext) => got.push({ data, seq: ctx.seq }));
  return { got, ready };
}

async function publishAll(channel: string, from: number, to: number): Promise<void> {
  for (let n = from; n <= to; n += 1) {
    const res = await broker.publish(channel, { n });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
}

test("auto falls back to SSE behind a proxy that refuses upgrades, and keeps receiving across subscribe/unsubscribe", async () => {
  const c = viaProxy.make({ token: await broker.token(grants) });
  const closes: { code: number; wasOpen: boolean }[] = [];
  c.on("close", (e) => closes.push({ code: e.code, wasOpen: e.wasOpen }));
  const welcome = await c.connect();
  assert.equal(welcome.account, "acme");
  assert.equal(c.transportKind, "sse");
  assert.ok(proxy.upgradesRefused >= 1, "the WebSocket was tried first");
  assert.deepEqual(closes[0], { code: 1006, wasOpen: false });
  assert.equal(c.state, "connected");

  const a = collect(c, "sse:a");
  await a.ready;
  await publishAll("sse:a", 1, 5);
  await until(() => a.got.length === 5, "the first five on sse:a");

  // Subscribing reopens the stream; what is published meanwhile on sse:a
  // still arrives, once, in order.
  const b = collect(c, "sse:b");
  await publishAll("sse:a", 6, 10);
  await b.ready;
  await publishAll("sse:b", 1, 2);
  await publishAll("sse:a", 11, 15);
  await until(() => a.got.length >= 15 && b.got.length >= 2, "everything on sse:a and sse:b");
  assert.deepEqual(
    a.got.map((m) => (m.data as { n: number }).n),
    Array.from({ length: 15 }, (_, i) => i + 1),
  );
  for (let i = 1; i < a.got.length; i += 1) assert.ok(a.got[i]!.seq > a.got[i - 1]!.seq);
  assert.deepEqual(b.got.map((m) => m.data), [{ n: 1 }, { n: 2 }]);

  // Unsubscribing reopens it too: sse:b stops, sse:a goes on without a gap.
  await c.unsubscribe("sse:b");
  await publishAll("sse:b", 3, 3);
  await publishAll("sse:a", 16, 17);
  await until(() => a.got.length >= 17, "sse:a after the unsubscribe");
  assert.deepEqual(a.got.slice(15).map((m) => m.data), [{ n: 16 }, { n: 17 }]);
  assert.equal(b.got.length, 2, "nothing from sse:b after its unsubscribe");
  assert.ok(proxy.forwarded.filter((p) => p === "/v1/sse").length >= 3, "each change reopened the stream");
  assert.equal(c.state, "connected");
});

test("over SSE, publish goes to POST /v1/client/publish and a WebSocket subscriber gets it", async () => {
  const token = await broker.token(grants);
  const listener = direct.make({ token });
  await listener.connect();
  assert.equal(listener.transportKind, "websocket");
  const heard = collect(listener, "sse:pub");
  await heard.ready;
  const c = viaProxy.make({ token });
  await c.connect();
  assert.equal(c.transportKind, "sse");
  const first = await c.publish("sse:pub", { from: "sse" });
  const second = await c.publish("sse:pub", { from: "sse", n: 2 });
  assert.ok(second.seq > first.seq);
  await until(() => heard.got.length === 2, "the WebSocket subscriber's copy");
  assert.deepEqual(heard.got.map((m) => m.seq), [first.seq, second.seq]);
  assert.ok(proxy.forwarded.includes("/v1/client/publish"));

  // The broker's refusals come back as on a socket.
  await assert.rejects(c.publish("elsewhere:1", 1), (e: { code?: string }) => e.code === "forbidden");
  // Socket-only requests say so.
  await assert.rejects(c.presence("sse:pub"), (e: { code?: string; message: string }) => {
    return e.code === "unsupported_transport" && /needs a WebSocket/.test(e.message);
  });
  await assert.rejects(c.requestBudget(), (e: { code?: string }) => e.code === "unsupported_transport");
});

test("a subscribe the stream refuses is rejected and the others go on", async () => {
  const c = viaProxy.make({ token: await broker.token(grants) });
  await c.connect();
  const a = collect(c, "sse:keep");
  await a.ready;
  await assert.rejects(c.subscribe("secret:1", () => undefined), (e: { code?: string }) => e.code === "forbidden");
  await publishAll("sse:keep", 1, 2);
  await until(() => a.got.length === 2, "sse:keep after the refused subscribe");
  assert.equal(c.state, "connected");
  assert.equal(c.transportKind, "sse");
});

test("transport: \"sse\" uses the stream directly; \"websocket\" never falls back", async () => {
  const token = await broker.token(grants);
  const sse = direct.make({ token, transport: "sse" });
  await sse.connect();
  assert.equal(sse.transportKind, "sse");
  const opened = nextEvent(sse, "message");
  const got = collect(sse, "sse:forced");
  await got.ready;
  await publishAll("sse:forced", 1, 1);
  await opened;
  assert.deepEqual(got.got.map((m) => m.data), [{ n: 1 }]);

  const ws = viaProxy.make({ token, transport: "websocket" });
  const refusedBefore = proxy.upgradesRefused;
  const closes: number[] = [];
  ws.on("close", (e) => closes.push(e.code));
  ws.connect().catch(() => undefined);
  await until(() => closes.length >= 2, "two refused upgrades");
  assert.equal(ws.transportKind, "websocket");
  assert.ok(proxy.upgradesRefused >= refusedBefore + 2);
  assert.notEqual(ws.state, "connected");
  ws.close();
});

test("a reopen with more channels than a named position holds resumes from the compact one", async () => {
  // 22 channels of 128 bytes: their named position is over 4 KiB, so the
  // transport writes the compact form for the reopen.
  const sent: string[] = [];
  const fetchImpl: FetchLike = (url, init) => {
    const position = init.headers?.["Last-Event-ID"];
    if (position !== undefined) sent.push(position);
    return (globalThis.fetch as unknown as FetchLike)(url, init);
  };
  const c = direct.make({ token: await broker.token(grants), transport: "sse", fetch: fetchImpl });
  await c.connect();
  const names = Array.from({ length: 22 }, (_, i) => `sse:${String(i).padStart(124, "0")}`);
  const subs = names.map((n) => collect(c, n));
  await Promise.all(subs.map((s) => s.ready));
  for (const n of names) await publishAll(n, 1, 1);
  await until(() => subs.every((s) => s.got.length === 1), "one message on every channel");

  // Subscribing reopens the stream; what is published meanwhile arrives
  // once, in order.
  const extra = collect(c, "sse:extra");
  await publishAll(names[0]!, 2, 3);
  await extra.ready;
  await publishAll(names[0]!, 4, 4);
  await publishAll(names[21]!, 2, 2);
  await until(() => subs[0]!.got.length >= 4 && subs[21]!.got.length >= 2, "the messages across the reopen");
  assert.deepEqual(
    subs[0]!.got.map((m) => m.data),
    [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }],
  );
  assert.deepEqual(subs[21]!.got.map((m) => m.data), [{ n: 1 }, { n: 2 }]);
  assert.ok(
    sent.some((p) => p.startsWith("~2.") && p.length <= 4096),
    `a compact position was sent: ${sent.map((p) => p.slice(0, 12)).join(", ")}`,
  );
  assert.equal(c.state, "connected");
});
