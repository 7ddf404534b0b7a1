/**
 * The operators' page (§10) in a real browser: two broker nodes sharing a
 * real Redis, Debian's chromium driven by playwright-core. The page asks
 * for the key once, shows the sockets this test opens within a couple of
 * seconds, and a ban made on the page closes the account's sockets on the
 * other node with 4003 and refuses its next handshake there with 403
 * `banned`. Screenshots go to test-results/admin-*.png.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import WebSocket from "ws";
import { chromium, type Browser } from "playwright-core";
import { brokerConfig, merge, SDK_ROOT, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";
import { startRedis, type Redis } from "../helpers/redis.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const RESULTS = join(SDK_ROOT, "test-results");
const ADMIN_KEY = "browser-admin-key-0123456789";

let redis: Redis;
let nodeA: Broker;
let nodeB: Broker;
let browser: Browser;
const sockets: WebSocket[] = [];

function nodeConfig(id: string): string {
  return brokerConfig(
    merge(TEST_BASE, {
      node: { id },
      cluster: {
        mode: "redis",
        redis_url: redis.url,
        key_prefix: `adminpage${process.pid}:`,
        lease_ms: 1000,
        secret: "sdk-test-cluster-secret-0123",
      },
      admin: { key: ADMIN_KEY },
    }),
  );
}

/** Opens a raw socket and resolves once welcomed. */
function open(broker: Broker, token: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(broker.wsUrl, ["tidegate.v1", `bearer.${token}`]);
    sockets.push(ws);
    ws.once("message", () => resolve(ws));
    ws.once("error", reject);
  });
}

/** The handshake's HTTP refusal: status and body. */
function refusal(broker: Broker, token: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(broker.wsUrl, ["tidegate.v1", `bearer.${token}`]);
    ws.once("open", () => {
      ws.close();
      reject(new Error("the handshake was accepted"));
    });
    ws.once("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    ws.once("error", () => undefined);
  });
}

async function bridgeUp(broker: Broker): Promise<void> {
  for (;;) {
    const text = await (await fetch(`${broker.httpUrl}/metrics`)).text();
    if (/^tidegate_cluster_bridge_up 1$/m.test(text)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install -y chromium)`);
  }
  mkdirSync(RESULTS, { recursive: true });
  redis = await startRedis();
  nodeA = await startBroker(nodeConfig("node-a"));
  nodeB = await startBroker(nodeConfig("node-b"));
  await Promise.all([bridgeUp(nodeA), bridgeUp(nodeB)]);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
  });
});

after(async () => {
  for (const s of sockets) s.terminate();
  await browser?.close();
  await nodeA?.stop();
  await nodeB?.stop();
  await redis?.stop();
});

test("the admin page shows live sockets, and a ban made on it closes them with 4003 and refuses the next handshake on another node", async () => {
  const page = await browser.newPage({ viewport: { width: 1200, height: 1400 } });
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  page.on("request", (r) => {
    if (!r.url().startsWith(nodeA.httpUrl)) problems.push(`request off the node: ${r.url()}`);
  });

  // Sockets of the account to ban on node B, and a bystander on node A.
  const spammerToken = await nodeB.token({ account: "spammer" });
  const spammer = [await open(nodeB, spammerToken), await open(nodeB, spammerToken), await open(nodeB, spammerToken)];
  await open(nodeA, await nodeA.token({ account: "bystander" }));
  // A refused handshake, for the chart.
  const bad = await refusal(nodeA, "not-a-token");
  assert.equal(bad.status, 401);

  await page.goto(`${nodeA.httpUrl}/admin`);
  await page.fill("#key", ADMIN_KEY);
  await page.click("#login-form button[type=submit]");
  // Both nodes' sockets, within a couple of seconds (summaries are shared
  // every 2 s).
  await page.waitForSelector('#accounts tr[data-account="spammer"]', { timeout: 8000 });
  await page.waitForFunction(() => document.getElementById("total-connections")?.textContent === "4", null, { timeout: 8000 });
  await page.waitForSelector('#legend li[data-series="handshake/unauthorized"]', { timeout: 8000 });
  assert.equal(await page.locator("#nodes tbody tr").count(), 2);
  assert.match((await page.locator('#accounts tr[data-account="spammer"]').innerText()), /3 \/ 8/);
  assert.deepEqual(await page.evaluate(() => Object.keys(sessionStorage)), ["tidegate.adminKey"]);
  assert.deepEqual(await page.evaluate(() => Object.keys(localStorage)), [], "nothing kept beyond the tab");
  await page.screenshot({ path: join(RESULTS, "admin-overview.png"), fullPage: true });

  // Ban from the page: the confirmation is accepted, then the page reports.
  const closes = spammer.map(
    (ws) => new Promise<{ code: number; reason: string }>((r) => ws.once("close", (code, reason) => r({ code, reason: reason.toString() }))),
  );
  page.once("dialog", (d) => {
    assert.match(d.message(), /Ban account spammer/);
    void d.accept();
  });
  await page.selectOption("#ban-kind", "account");
  await page.fill("#ban-value", "spammer");
  await page.fill("#ban-minutes", "10");
  await page.click("#ban-form button[type=submit]");
  for (const c of await Promise.all(closes)) assert.deepEqual(c, { code: 4003, reason: "banned" });
  await page.waitForSelector("#status:has-text('Banned account spammer')", { timeout: 5000 });
  await page.waitForSelector('#bans tr[data-ban="spammer"]', { timeout: 5000 });

  const refused = await refusal(nodeB, spammerToken);
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error, "banned");
  assert.ok(refused.body.retryAfterMs > 590_000, JSON.stringify(refused.body));
  // The page follows: node b's next summary no longer has the sockets.
  await page.waitForFunction(() => document.getElementById("total-connections")?.textContent === "1", null, { timeout: 8000 });
  await page.screenshot({ path: join(RESULTS, "admin-banned.png"), fullPage: true });

  // Lift it from the page.
  page.once("dialog", (d) => void d.accept());
  await page.click('#bans tr[data-ban="spammer"] button');
  await page.waitForSelector("#status:has-text('lifted')", { timeout: 5000 });
  // Lifted on the node that answered at once (the others within a
  // broadcast).
  await open(nodeA, spammerToken);
  assert.deepEqual(problems, []);
  await page.close();
});
