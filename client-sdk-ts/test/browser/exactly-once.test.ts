/**
 * Publishing exactly once (PROTOCOL.md §17) from a real browser: Debian's
 * chromium (playwright-core) runs the SDK bundle against the real broker
 * in cluster mode on a real Redis. The page publishes; the test cuts the
 * page's connection (a TCP proxy destroys its sockets) whenever the
 * subscriber in Node has seen another batch, so publishes are in flight
 * at every cut. Every `publish()` in the page resolves once with one seq,
 * and the subscriber sees each message once. Once over the WebSocket, once
 * over the SSE fallback behind a proxy that blocks WebSockets.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import type { Browser, Page } from "playwright-core";
import { TidegateClient } from "../../src/client.js";
import { startBroker, type Broker } from "../helpers/broker.js";
import { blankPage, launchChromium } from "../helpers/chromium.js";
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
let browser: Browser;
let cutting: DropProxy;
/** Serves the page and the bundle, forwards plain HTTP, refuses upgrades. */
let site: NoUpgradeProxy;
const clients: TidegateClient[] = [];

before(async () => {
  const { page, bundle } = blankPage("exactly-once");
  redis = await startRedis();
  broker = await startBroker(exactlyOnceConfig(redis.url, "browser"));
  await bridgeUp(broker.httpUrl);
  cutting = await DropProxy.start(broker.port);
  site = await NoUpgradeProxy.start(broker.port, {
    "/": ["text/html", page],
    "/sdk/tidegate.js": ["text/javascript", bundle],
  });
  browser = await launchChromium();
});

after(async () => {
  for (const c of clients) c.close();
  await browser?.close();
  await cutting?.stop();
  await site?.stop();
  await broker?.stop();
  await redis?.stop();
});

/**
 * In the page: a client on `url` (forced `transport` if given) publishes
 * `{i}` for i in [0, n) at once, then the end marker; returns each
 * outcome and the transport it ended on.
 */
function publishFromPage(
  page: Page,
  args: { url: string; token: string; channel: string; n: number; transport?: string },
): Promise<{ outcomes: Outcome[]; transport: string; closes: number }> {
  return page.evaluate(
    async ({ sdk, url, token, channel, n, transport }) => {
      const { TidegateClient } = await import(sdk);
      const c = new TidegateClient({
        url,
        token,
        maxQueue: 5000,
        minReconnectDelayMs: 20,
        maxReconnectDelayMs: 200,
        ...(transport ? { transport } : {}),
      });
      let closes = 0;
      c.on("close", () => (closes += 1));
      await c.connect();
      const outcomes = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          c.publish(channel, { i }).then(
            (r: { seq: number; attempts: number; key: string; duplicate?: boolean }) => ({ ok: true, ...r }),
            (e: { code: string; message: string }) => ({ ok: false, code: e.code, message: e.message }),
          ),
        ),
      );
      await c.publish(channel, { end: true });
      const transportKind = c.transportKind as string;
      c.close();
      return { outcomes, transport: transportKind, closes };
    },
    { sdk: `${site.url}/sdk/tidegate.js`, ...args, transport: args.transport ?? "" },
  ) as Promise<{ outcomes: Outcome[]; transport: string; closes: number }>;
}

async function run(
  channel: string,
  n: number,
  every: number,
  times: number,
  drop: () => void,
  ready: () => boolean,
  pageArgs: { url: string; transport?: string },
) {
  const token = await broker.token({});
  const subscriber = new TidegateClient({ url: broker.wsUrl, token, WebSocket });
  clients.push(subscriber);
  const tally = new Tally();
  const cuts = cutter(drop, every, times, ready);
  await subscriber.connect();
  await subscriber.subscribe(channel, (data, ctx) => {
    tally.handler(data, ctx);
    cuts.saw();
  });
  const page = await browser.newPage();
  const pageErrors: string[] = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(`${site.url}/`);
  const { outcomes, transport, closes } = await publishFromPage(page, { ...pageArgs, token, channel, n });
  await page.close();
  const seqs = assertAllResolved(outcomes);
  await until(() => tally.done, "the end marker at the subscriber", 30_000);
  assert.equal(cuts.cuts, times, "the page was cut mid-publish every time");
  // The page's state is not visible from here: a cut may land while it
  // reconnects. At least one landed on an open connection.
  assert.ok(closes >= 1, `the page's client saw its connection go (${closes} closes)`);
  assert.ok(
    outcomes.some((o) => o.ok && o.attempts > 1),
    "some publishes were cut off and sent again",
  );
  tally.assertOnce(n, seqs, "the subscriber");
  assert.deepEqual(pageErrors, []);
  return transport;
}

test("in the browser, over the WebSocket, publishes cut off mid-flight settle once and are delivered once", async () => {
  const transport = await run("doc:eo-page-ws", 500, 70, 5, () => cutting.dropAll(), () => cutting.open > 0, {
    url: cutting.wsUrl,
    transport: "websocket",
  });
  assert.equal(transport, "websocket");
});

test("in the browser, over the SSE fallback, publishes cut off mid-POST settle once and are delivered once", async () => {
  // No transport option: "auto" meets the blocked upgrade and falls back to SSE.
  const transport = await run("doc:eo-page-sse", 200, 30, 4, () => site.dropAll(), () => true, {
    url: site.wsUrl,
  });
  assert.equal(transport, "sse");
});
