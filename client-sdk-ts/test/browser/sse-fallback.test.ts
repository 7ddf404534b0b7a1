/**
 * `transport: "auto"` in a real browser (Debian's chromium driven by
 * playwright-core) behind a proxy that refuses WebSocket upgrades
 * (test/helpers/no-upgrade-proxy.ts, which also serves the page and the
 * SDK bundle, so the stream is same-origin): the app's code is the
 * ordinary connect/subscribe/publish, and it keeps receiving and
 * publishing over `GET /v1/sse` and `POST /v1/client/publish`.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import type { Browser } from "playwright-core";
import { TidegateClient } from "../../src/client.js";
import type { Json } from "../../src/types.js";
import { brokerConfig, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";
import { blankPage, launchChromium } from "../helpers/chromium.js";
import { NoUpgradeProxy } from "../helpers/no-upgrade-proxy.js";
import { until } from "../helpers/events.js";

let broker: Broker;
let browser: Browser;
let proxy: NoUpgradeProxy;

before(async () => {
  const { page, bundle } = blankPage("sse-fallback");
  broker = await startBroker(brokerConfig(TEST_BASE));
  proxy = await NoUpgradeProxy.start(broker.port, {
    "/": ["text/html", page],
    "/sdk/tidegate.js": ["text/javascript", bundle],
  });
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await proxy?.stop();
  await broker?.stop();
});

test("in the browser, with WebSockets blocked, the app keeps receiving and publishing over SSE", async () => {
  const token = await broker.token({ sub: ["room:*"], pub: ["room:*"] });
  const outside = new TidegateClient({ url: broker.wsUrl, token, WebSocket });
  const heard: Json[] = [];
  try {
    await outside.connect();
    await outside.subscribe("room:out", (data) => void heard.push(data));

    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    await page.goto(`${proxy.url}/`);
    // The app's whole code: connect, subscribe, publish. No transport option.
    const started = await page.evaluate(
      async ({ sdk, url, token }) => {
        const { TidegateClient } = await import(sdk);
        const w = window as unknown as { got: number[]; app: any };
        w.got = [];
        const c = new TidegateClient({ url, token });
        w.app = c;
        await c.connect();
        await c.subscribe("room:in", (data: { n: number }) => w.got.push(data.n));
        return { transport: c.transportKind, state: c.state };
      },
      { sdk: `${proxy.url}/sdk/tidegate.js`, url: proxy.wsUrl, token },
    );
    assert.deepEqual(started, { transport: "sse", state: "connected" });
    assert.ok(proxy.upgradesRefused >= 1, "the browser tried the WebSocket first");

    for (let n = 1; n <= 5; n += 1) {
      const res = await broker.publish("room:in", { n });
      assert.equal(res.status, 200);
    }
    await page.waitForFunction(() => (window as unknown as { got: number[] }).got.length >= 5, undefined, {
      timeout: 10_000,
    });

    // Subscribing to another channel reopens the stream; room:in goes on.
    const published = await page.evaluate(async () => {
      const c = (window as unknown as { app: any }).app;
      await c.subscribe("room:other", () => undefined);
      const acks = [];
      for (let i = 1; i <= 3; i += 1) acks.push((await c.publish("room:out", { i })).seq);
      return acks as number[];
    });
    assert.equal(published.length, 3);
    for (let n = 6; n <= 8; n += 1) await broker.publish("room:in", { n });
    await page.waitForFunction(() => (window as unknown as { got: number[] }).got.length >= 8, undefined, {
      timeout: 10_000,
    });
    const got = await page.evaluate(() => (window as unknown as { got: number[] }).got);
    assert.deepEqual(got, [1, 2, 3, 4, 5, 6, 7, 8], "every message, in order, once");
    await until(() => heard.length === 3, "the browser's publishes at a WebSocket subscriber", 10_000);
    assert.deepEqual(heard, [{ i: 1 }, { i: 2 }, { i: 3 }]);
    assert.ok(proxy.forwarded.includes("/v1/client/publish"));
    assert.deepEqual(pageErrors, []);
    await page.close();
  } finally {
    outside.close();
  }
});
