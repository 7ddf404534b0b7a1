// The operator's page (§10) shows the Pusher apps (§16's "every figure by
// app in the admin overview") in a real browser: Debian's chromium driven
// by playwright-core, as pusher-chromium.test.mjs does. pusher-js 8 (its
// Node build) holds two connections of the sample app on the release
// broker and sends a client event, the `pusher` library triggers one; the
// page, opened with the viewer key, lists the app with those figures,
// updates as a connection leaves, and offers no action to a viewer.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { startBroker } from "../lib/broker.mjs";
import { authorizedBy, connected, pusherServer, SAMPLE_APP, subscribed } from "../lib/pusher.mjs";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const WAIT = { timeout: 10_000 };
const APP = SAMPLE_APP;
const VIEWER_KEY = "viewer-key-0123456789abcdef";
const ADMIN = `[admin]\nkey = "admin-key-0123456789abcdef"\nviewer_key = "${VIEWER_KEY}"\n`;

let broker;
let server;
let browser;
let port;
const clients = [];

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-deps (apt-get install -y chromium)`);
  }
  broker = await startBroker({}, ADMIN);
  port = Number(new URL(broker.url).port);
  server = pusherServer(APP, port);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"],
  });
});
after(async () => {
  for (const c of clients) c.disconnect();
  await browser?.close();
  await broker?.stop();
});

/** A pusher-js client of the sample app, once connected. */
const client = () => connected(APP, port, clients, authorizedBy(server));

/** The app's row as the page shows it: its cells' text by column name. */
async function row(page, id) {
  return page.evaluate((appId) => {
    const table = document.getElementById("pusher-apps");
    const names = [...table.tHead.rows[0].cells].map((c) => c.textContent.trim());
    const tr = table.querySelector(`tr[data-app="${appId}"]`);
    if (!tr) return null;
    return Object.fromEntries([...tr.cells].map((c, i) => [names[i] || `#${i}`, c.textContent.trim()]));
  }, id);
}

test("the admin page lists the Pusher apps with their figures", async () => {
  const a = await client();
  const b = await client();
  const heard = new Promise((ok) => b.connection.bind("message", (m) => m.event === "client-typing" && ok()));
  const room = await subscribed(a, "private-room");
  await subscribed(b, "private-room");
  await subscribed(a, "lobby");
  room.trigger("client-typing", { on: true });
  await heard;
  await server.trigger("lobby", "news", { n: 1 });

  const errors = [];
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${broker.url}/admin`);
  await page.fill("#key", VIEWER_KEY);
  await page.click("#login-form button");
  await page.waitForSelector('#pusher-apps tr[data-app="1234"]', WAIT);
  const shown = await row(page, "1234");
  assert.equal(shown.key, "app-key");
  assert.equal(shown.account, "acme");
  assert.equal(shown.connections, "2");
  assert.equal(shown.channels, "2");
  assert.equal(shown["client events"], "1");
  assert.equal(shown["API events"], "1");
  assert.match(shown.limits, /%$/);
  assert.equal(await page.isVisible("#pusher-apps-section"), true);
  // A viewer gets no action: neither the row's button nor the forms.
  assert.equal(await page.isVisible('#pusher-apps tr[data-app="1234"] button'), false);
  assert.equal(await page.isVisible("#actions"), false);
  assert.equal((await page.content()).includes(APP.secret), false, "the secret is never shown");

  // The page follows a connection that leaves (it polls every 2 s).
  b.disconnect();
  await page.waitForFunction(
    () => document.querySelector('#pusher-apps tr[data-app="1234"]')?.cells[3].textContent.trim() === "1",
    null,
    WAIT,
  );
  assert.deepEqual(errors, []);
});
