/**
 * The example page in a real browser: Debian's chromium driven by
 * playwright-core loads examples/collab-note (served with the SDK bundle
 * from a tiny static server), subscribes, shows a message published over
 * HTTP, publishes its own keystrokes, and shows the live budget.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import WebSocket from "ws";
import { chromium, type Browser } from "playwright-core";
import { TidegateClient } from "../../src/client.js";
import { brokerConfig, REPO_ROOT, SDK_ROOT, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SCREENSHOT = join(SDK_ROOT, "test-results", "browser.png");

let broker: Broker;
let browser: Browser;
let site: { url: string; stop(): Promise<void> };

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install -y chromium)`);
  }
  if (!existsSync(join(SDK_ROOT, "dist", "tidegate.js"))) {
    throw new Error("dist/tidegate.js is missing: run `npm run build`");
  }
  broker = await startBroker(brokerConfig(TEST_BASE));
  const serve = (await import(join(REPO_ROOT, "examples", "serve.mjs"))) as {
    startStaticServer(o: { port: number }): Promise<{ url: string; stop(): Promise<void> }>;
  };
  site = await serve.startStaticServer({ port: 0 });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    // launch() gives every run a fresh temporary profile of its own.
  });
});

after(async () => {
  await browser?.close();
  await site?.stop();
  await broker?.stop();
});

test("the collab-note example connects, shows an HTTP publish, publishes keystrokes and shows the budget", async () => {
  const token = await broker.token({ sub: "note:*", pub: "note:*" });
  const page = await browser.newPage({ viewport: { width: 1100, height: 640 } });
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("response", (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} ${r.url()}`);
  });
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  const query = new URLSearchParams({ url: broker.wsUrl, token, note: "e2e" });
  await page.goto(`${site.url}/collab-note/?${query}`);

  await page.waitForSelector('#state[data-state="connected"]', { timeout: 15_000 });
  await page.waitForSelector('body[data-subscribed="true"]', { timeout: 15_000 });

  // A message published over HTTP shows up in the page.
  const text = "Hello from the HTTP publish API";
  const res = await broker.publish("note:e2e", { text, from: "http" });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  await page.waitForFunction(
    (t) => (document.getElementById("note") as HTMLTextAreaElement).value === t,
    text,
    { timeout: 10_000 },
  );
  assert.equal(await page.textContent("#last-from"), "updated by http");

  // Keystrokes typed in the page are published in batches another client sees.
  const watcher = new TidegateClient({ url: broker.wsUrl, token, WebSocket });
  try {
    await watcher.connect();
    const typed = " — and typed in the browser";
    const seen = new Promise<string>((resolve) =>
      void watcher.subscribe("note:e2e", (data) => {
        const t = (data as { text?: string }).text ?? "";
        if (t.endsWith(typed)) resolve(t);
      }),
    );
    await watcher.subscribe("note:e2e", () => undefined);
    await page.click("#note");
    await page.keyboard.press("End");
    await page.keyboard.type(typed, { delay: 15 });
    assert.equal(await seen, text + typed);
    const batches = Number(await page.textContent("#published"));
    assert.ok(batches >= 1 && batches < typed.length, `keystrokes were batched (${batches} publishes)`);
  } finally {
    watcher.close();
  }

  // The live budget comes from budget frames and the welcome limits.
  await page.waitForFunction(() => /\d+\/20/.test(document.getElementById("conn-text")!.textContent ?? ""));
  const limits = await page.textContent("#limits");
  assert.match(limits ?? "", /messages\/s\s*20/);

  mkdirSync(join(SDK_ROOT, "test-results"), { recursive: true });
  await page.screenshot({ path: SCREENSHOT, fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});
