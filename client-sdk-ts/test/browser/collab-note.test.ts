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
import { brokerConfig, merge, REPO_ROOT, SDK_ROOT, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";
import { DropProxy } from "../helpers/proxy.js";
import { publishBatches, SLOW_READER } from "../helpers/slow.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SCREENSHOT = join(SDK_ROOT, "test-results", "browser.png");

let broker: Broker;
let browser: Browser;
let site: { url: string; stop(): Promise<void> };
let proxy: DropProxy;

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install -y chromium)`);
  }
  if (!existsSync(join(SDK_ROOT, "dist", "tidegate.js"))) {
    throw new Error("dist/tidegate.js is missing: run `npm run build`");
  }
  broker = await startBroker(brokerConfig(merge(TEST_BASE, SLOW_READER)));
  proxy = await DropProxy.start(broker.port);
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
  await proxy?.stop();
  await browser?.close();
  await site?.stop();
  await broker?.stop();
});

test("the collab-note example connects, shows an HTTP publish, publishes keystrokes and shows the budget", async () => {
  const grants = { sub: ["note:*", "cursor:*"], pub: ["note:*", "cursor:*"] };
  const token = await broker.token({ ...grants, account: "ann", info: { name: "Ann" } });
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

  // Presence (§13): the page lists who is in the note, live, by `info.name`.
  await page.waitForSelector('#members .member[data-name="Ann"]', { timeout: 10_000 });
  const guest = new TidegateClient({
    url: broker.wsUrl,
    token: await broker.token({ ...grants, account: "bob", info: { name: "Bob" } }),
    WebSocket,
  });
  await guest.connect();
  await guest.subscribe("note:e2e", () => undefined);
  await page.waitForSelector('body[data-members="2"] #members .member[data-name="Bob"]', { timeout: 10_000 });

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
  // The page shows no error the user did not provoke.
  const events = (await page.textContent("#log")) ?? "";
  assert.doesNotMatch(events, /error|failed|forbidden/, events);

  // Bob leaves: the list follows.
  guest.close();
  await page.waitForSelector('body[data-members="1"]', { timeout: 10_000 });
  await page.close();
});

test("two pages of the demo see each other's cursor through the conflating cursor channel", async () => {
  const token = await broker.token({ sub: ["note:*", "cursor:*"], pub: ["note:*", "cursor:*"] });
  const query = new URLSearchParams({ url: broker.wsUrl, token, note: "cursors" });
  const [a, b] = [await browser.newPage(), await browser.newPage()];
  for (const p of [a, b]) {
    await p.goto(`${site.url}/collab-note/?${query}`);
    await p.waitForSelector('body[data-cursors="true"]', { timeout: 15_000 });
  }
  await a.click("#note");
  await a.keyboard.type("hello cursors", { delay: 10 });
  const userA = await a.evaluate(() => (window as unknown as { tidegateUser: string }).tidegateUser);
  // b shows a's caret where a typed up to (the latest value, whatever came before).
  const caret = await b.waitForSelector(`#cursor-view .caret[data-user="${userA}"][data-pos="13"]`, {
    timeout: 10_000,
  });
  assert.ok(caret);
  mkdirSync(join(SDK_ROOT, "test-results"), { recursive: true });
  await b.screenshot({ path: join(SDK_ROOT, "test-results", "cursors.png"), fullPage: true });
  await a.close();
  await b.close();
});

/** What the slow-subscriber page keeps on `window`. */
interface Slow {
  got: number[];
  slow: number;
  gaps: number;
  states: string[];
  subscribes: number;
}

test("in the browser, a subscriber made slow on purpose ends with every message, in order, once", async () => {
  const token = await broker.token({});
  const page = await browser.newPage();
  await page.goto(`${site.url}/sdk/tidegate.js`);
  // The app's whole code: connect and subscribe. The proxy in front of the
  // broker stops reading, as a browser tab that cannot keep up would.
  await page.evaluate(
    async ({ sdk, url, token }) => {
      const { TidegateClient } = await import(sdk);
      const w = window as unknown as Slow;
      w.got = [];
      w.slow = 0;
      w.gaps = 0;
      w.states = [];
      w.subscribes = 0;
      // Counts the subscribe frames the client sends: its first, then one
      // per recovery.
      const Native = window.WebSocket;
      window.WebSocket = class extends Native {
        override send(d: string | ArrayBufferLike | Blob | ArrayBufferView): void {
          if (typeof d === "string" && d.includes('"type":"subscribe"')) w.subscribes += 1;
          super.send(d);
        }
      };
      const c = new TidegateClient({ url, token });
      c.on("slowConsumer", () => (w.slow += 1));
      c.on("state", ({ state }: { state: string }) => w.states.push(state));
      c.on("gap", () => (w.gaps += 1));
      await c.connect();
      await c.subscribe("doc:browser", (data: { i: number }) => w.got.push(data.i));
    },
    { sdk: `${site.url}/sdk/tidegate.js`, url: proxy.wsUrl, token },
  );
  proxy.pauseDownstream();
  const n = 2000;
  const pad = "p".repeat(500);
  await publishBatches(broker, "doc:browser", n, (i) => ({ i, pad }));
  proxy.resumeDownstream();
  const seen = () =>
    page.evaluate(() => {
      const w = window as unknown as Slow;
      return { got: w.got, slow: w.slow, gaps: w.gaps, states: w.states, subscribes: w.subscribes };
    });
  try {
    await page.waitForFunction((n) => (window as unknown as { got: number[] }).got.length >= n, n, {
      timeout: 30_000,
    });
  } catch (e) {
    // Say where it stood: how far delivery got, and what the client went through.
    const { got, slow, gaps, states, subscribes } = await seen();
    const metrics = await (await fetch(`${broker.httpUrl}/metrics`)).text();
    const outbound = metrics.split("\n").filter((l) => /^tidegate_\w*(slow|outbound|recover|drop)/.test(l));
    throw new Error(
      `${got.length}/${n} delivered (last ${got.at(-1)}), ${slow} slow_consumer, ${gaps} gaps, ` +
        `${subscribes} subscribes, states ${states.join(" > ")}\n${outbound.join("\n")}`,
      { cause: e },
    );
  }
  const { got, slow, gaps, subscribes } = await seen();
  assert.ok(slow > 0, "the broker dropped some and said so");
  assert.equal(gaps, 0);
  // Every drop happened before the client's recovering subscribe was read,
  // so the broker reported them all ahead of its ack: one recovery, not a
  // second one for drops the first already covered (which waited 15 s on
  // the first one's recovery debt).
  assert.equal(subscribes, 2, "the subscribe, then one recovery");
  assert.deepEqual(got, Array.from({ length: n }, (_, i) => i), "every message, in order, once");
  await page.close();
});
