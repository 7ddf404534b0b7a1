/**
 * Backend hooks in a real browser (Debian's chromium driven by
 * playwright-core) against a real backend that reads a cookie: the
 * example backend (examples/hooks/backend.mjs) serves its page and the SDK
 * bundle, and answers the broker's hooks from its own sessions. The page
 * logs in (a `sid` cookie, HttpOnly: the page's script never sees it),
 * connects without a token, uses the server-side channel, publishes (the
 * hook rewrites it), calls RPCs and meets a hook's refusal. The broker is
 * on another port, so the page's Origin is let in by `allowed_origins`.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { brokerConfig, REPO_ROOT, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";
import { blankPage, launchChromium } from "../helpers/chromium.js";

const EXAMPLE = join(REPO_ROOT, "examples", "hooks");

let broker: Broker;
let browser: Browser;
let backend: { url: string; calls: Array<{ event: string; headers?: Record<string, string> }>; stop(): Promise<void> };

before(async () => {
  blankPage("hooks"); // fails (never skips) without chromium or the bundle
  if (!existsSync(join(REPO_ROOT, "examples", "node_modules", "standardwebhooks"))) {
    throw new Error("the example backend's packages are missing: run `npm ci` in examples/");
  }
  const example = (await import(join(EXAMPLE, "backend.mjs"))) as {
    startBackend(o: { port: number }): Promise<typeof backend>;
  };
  backend = await example.startBackend({ port: 0 });
  const block = readFileSync(join(EXAMPLE, "hooks.toml"), "utf8").replaceAll("http://127.0.0.1:9000", backend.url);
  broker = await startBroker(`${brokerConfig(TEST_BASE)}\n${block}`);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await broker?.stop();
  await backend?.stop();
});

/** Waits until the page's log has a line containing `text`. */
async function logged(page: Page, text: string): Promise<void> {
  await page.waitForFunction(
    (t) => (window as unknown as { app: { log(): string } }).app.log().includes(t),
    text,
    { timeout: 10_000 },
  );
}

async function logIn(name: string): Promise<Page> {
  const context = await browser.newContext(); // its own cookie jar
  const page = await context.newPage();
  await page.goto(`${backend.url}/?broker=${encodeURIComponent(broker.wsUrl)}`);
  await page.fill("#name", name);
  await page.click("#login");
  await logged(page, "subscribed to room:lobby");
  return page;
}

test("in the browser, a cookie session connects without a token and the hooks decide", async () => {
  const ann = await logIn("ann");
  const errors: string[] = [];
  ann.on("pageerror", (e) => errors.push(e.message));
  await logged(ann, "the broker joined user:ann");
  assert.equal(await ann.evaluate(() => document.cookie), "", "the session cookie is HttpOnly");
  const connect = backend.calls.find((c) => c.event === "connect" && c.headers?.cookie);
  assert.ok(connect, "the connect hook got the cookie");
  assert.match(connect.headers!.cookie!, /^sid=[0-9a-f]{32}$/);
  assert.equal(connect.headers!.origin, backend.url, "and the page's Origin");
  const state = await ann.evaluate(() => {
    const c = (window as unknown as { app: { client(): any } }).app.client();
    const s = c.subscription("user:ann");
    return { state: c.state, transport: c.transportKind, server: s?.server, live: s?.live };
  });
  assert.deepEqual(state, { state: "connected", transport: "websocket", server: true, live: true });

  // The publish hook rewrites: trimmed, signed with who said it.
  await ann.fill("#text", "   hello from the page   ");
  await ann.click("#say");
  await logged(ann, "ann: hello from the page\n");

  await ann.click("#whoami");
  await logged(ann, 'whoami → {"name":"ann","transport":"websocket"}');
  await ann.click("#vip");
  await logged(ann, "subscribed to room:vip");

  // Another user, another cookie jar: the subscribe hook refuses, typed.
  const bob = await logIn("bob");
  await logged(bob, "the broker joined user:bob");
  await bob.click("#vip");
  await logged(bob, "room:vip refused not_invited: room:vip is for ann");
  await bob.fill("#text", "hi ann");
  await bob.click("#say");
  await logged(ann, "bob: hi ann");
  await bob.fill("#text", "    ");
  await bob.click("#say");
  await logged(bob, "publish refused empty_message: say something");
  assert.deepEqual(errors, []);
  await ann.screenshot({ path: join(REPO_ROOT, "client-sdk-ts", "test-results", "hooks.png") });
});
