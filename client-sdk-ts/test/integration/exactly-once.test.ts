/**
 * Publishing exactly once (PROTOCOL.md §17) against the real broker in
 * cluster mode on a real Redis: the publisher's connection is cut (a TCP
 * proxy destroys its sockets) again and again while its publishes are in
 * flight. Every `publish()` resolves once, with one seq; every subscriber
 * (one straight to the broker, one behind the same cutting proxy, which
 * recovers with `since`) sees each message once; none is lost. Once over
 * the WebSocket, once over the SSE fallback (`POST /v1/client/publish`
 * with `Idempotency-Key`).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { ClientOptions } from "../../src/types.js";
import { startBroker, type Broker } from "../helpers/broker.js";
import { startRedis, type Redis } from "../helpers/redis.js";
import { DropProxy } from "../helpers/proxy.js";
import { NoUpgradeProxy } from "../helpers/no-upgrade-proxy.js";
import { until } from "../helpers/events.js";
import {
  assertAllResolved,
  bridgeUp,
  cutter,
  exactlyOnceConfig,
  Tally,
  type Outcome,
} from "../helpers/exactly-once.js";

let redis: Redis;
let broker: Broker;
let proxy: DropProxy;
let blocking: NoUpgradeProxy;
const made: TidegateClient[] = [];

function client(options: Partial<ClientOptions>): TidegateClient {
  const c = new TidegateClient({
    url: broker.wsUrl,
    WebSocket,
    minReconnectDelayMs: 20,
    maxReconnectDelayMs: 200,
    maxQueue: 5000,
    ...options,
  } as ClientOptions);
  made.push(c);
  return c;
}

before(async () => {
  redis = await startRedis();
  broker = await startBroker(exactlyOnceConfig(redis.url, "node"));
  await bridgeUp(broker.httpUrl);
  proxy = await DropProxy.start(broker.port);
  blocking = await NoUpgradeProxy.start(broker.port);
});

after(async () => {
  for (const c of made) c.close();
  await proxy?.stop();
  await blocking?.stop();
  await broker?.stop();
  await redis?.stop();
});

/** Publishes `n` messages `{i}` on `channel` at once and settles each into an Outcome. */
async function publishAll(c: TidegateClient, channel: string, n: number): Promise<Outcome[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      c.publish(channel, { i }).then(
        (r): Outcome => ({ ok: true, ...r }),
        (e: { code: string; message: string }): Outcome => ({ ok: false, code: e.code, message: e.message }),
      ),
    ),
  );
}

/**
 * The run both transports share: two subscribers, the publisher cut every
 * `every` messages (`times` cuts), then every check of exactly once.
 */
async function cutMidPublish(
  channel: string,
  publisher: TidegateClient,
  drop: () => void,
  n: number,
  every: number,
  times: number,
): Promise<Outcome[]> {
  const token = await broker.token({});
  const direct = client({ token });
  const behind = client({ token, url: proxy.wsUrl, transport: "websocket" });
  const atDirect = new Tally();
  const atBehind = new Tally();
  // Each cut waits for the publisher to be welcomed again after the last
  // one, so every cut lands on an open connection with publishes on it.
  let welcomes = 0;
  publisher.on("welcome", () => (welcomes += 1));
  const cuts = cutter(drop, every, times, () => publisher.state === "connected" && welcomes > cuts.cuts);
  await Promise.all([direct.connect(), behind.connect(), publisher.connect()]);
  await direct.subscribe(channel, (data, ctx) => {
    atDirect.handler(data, ctx);
    cuts.saw();
  });
  await behind.subscribe(channel, atBehind.handler);
  let closes = 0;
  publisher.on("close", () => (closes += 1));

  const outcomes = await publishAll(publisher, channel, n);
  const seqs = assertAllResolved(outcomes);
  // A barrier: messages arrive in seq order, so once it is seen nothing
  // published before it (a second copy included) is still on its way.
  await publisher.publish(channel, { end: true });
  await until(() => atDirect.done && atBehind.done, "the end marker at both subscribers", 30_000);

  assert.equal(cuts.cuts, times, "the publisher was cut mid-publish every time");
  assert.ok(closes >= times, `the publisher saw its connection go (${closes} closes)`);
  const resent = outcomes.filter((o) => o.ok && o.attempts > 1).length;
  assert.ok(resent > 0, "some publishes were cut off and sent again");
  atDirect.assertOnce(n, seqs, "the subscriber on the broker");
  atBehind.assertOnce(n, seqs, "the subscriber behind the cutting proxy");
  return outcomes;
}

/** `tidegate_publish_duplicates_total{api}` on the broker now. */
async function duplicatesCounted(api: string): Promise<number> {
  const text = await (await fetch(`${broker.httpUrl}/metrics`)).text();
  const m = new RegExp(`^tidegate_publish_duplicates_total\\{api="${api}"\\} (\\d+)`, "m").exec(text);
  return m ? Number(m[1]) : 0;
}

/**
 * Whether an ack was lost after the broker published (a duplicate answer)
 * or before it read the frame (a first publish) depends on timing; both
 * resolve with one seq. What must hold: every duplicate the SDK was told
 * of is one the broker counted (it counts some whose answer was cut too).
 */
function assertDuplicatesCounted(outcomes: Outcome[], before: number, after: number): void {
  const told = outcomes.filter((o) => o.ok && o.duplicate).length;
  assert.ok(after - before >= told, `the broker counted ${after - before} duplicates, the SDK was told of ${told}`);
}

test("WebSocket: cut mid-publish over and over, every publish settles once and is delivered once", async () => {
  const token = await broker.token({});
  const publisher = client({ token, url: proxy.wsUrl, transport: "websocket" });
  const before = await duplicatesCounted("ws");
  const outcomes = await cutMidPublish("doc:eo-ws", publisher, () => proxy.dropAll(), 600, 60, 5);
  assertDuplicatesCounted(outcomes, before, await duplicatesCounted("ws"));
});

test("SSE fallback: publishes cut off mid-POST are posted again with Idempotency-Key and delivered once", async () => {
  const token = await broker.token({});
  // WebSockets blocked by the proxy: "auto" falls back to the SSE stream.
  const publisher = client({ token, url: blocking.wsUrl });
  const before = await duplicatesCounted("client");
  const outcomes = await cutMidPublish("doc:eo-sse", publisher, () => blocking.dropAll(), 240, 40, 4);
  assert.equal(publisher.transportKind, "sse");
  assertDuplicatesCounted(outcomes, before, await duplicatesCounted("client"));
});
