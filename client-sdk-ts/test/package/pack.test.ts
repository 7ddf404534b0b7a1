/**
 * The package as a user gets it: `npm pack`, installed into a scratch
 * project, then imported three ways against the real broker — Node ESM
 * (`import`), Node CommonJS (`require`) and a plain `<script type=module>`
 * in Chromium loading the bundle the `./browser` export names. Each one
 * connects and prints the welcome's account, so an export that resolves to
 * a broken build fails here.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { chromium } from "playwright-core";
import { brokerConfig, SDK_ROOT, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";

const run = promisify(execFile);
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** `ws` from the SDK's dev dependencies: Node 20 has no global WebSocket. */
const WS_PATH = join(SDK_ROOT, "node_modules", "ws", "index.js");

let broker: Broker;
let scratch: string;
let installed: string;

before(async () => {
  broker = await startBroker(brokerConfig(TEST_BASE));
  scratch = mkdtempSync(join(tmpdir(), "tidegate-pack-"));
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", scratch], { cwd: SDK_ROOT });
  const [packed] = JSON.parse(stdout) as Array<{ filename: string }>;
  writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "scratch", private: true }));
  await run("npm", ["install", "--no-audit", "--no-fund", "--offline", `./${packed!.filename}`], { cwd: scratch });
  installed = join(scratch, "node_modules", "@tidegate", "client");
});

after(async () => {
  await broker?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );
}

test("the package ships every file its exports and source maps point at", () => {
  const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  assert.equal(pkg.license, "Apache-2.0");
  assert.ok(pkg.repository?.url, "repository");
  assert.ok(pkg.publishConfig?.access, "publishConfig");
  assert.ok(existsSync(join(installed, "LICENSE")), "LICENSE");
  const targets: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === "string") targets.push(v);
    else if (v && typeof v === "object") Object.values(v).forEach(walk);
  };
  walk(pkg.exports);
  for (const t of targets) assert.ok(existsSync(join(installed, t)), `exports → ${t} is not in the package`);
  const maps = filesUnder(installed).filter((f) => f.endsWith(".map"));
  assert.ok(maps.length > 0);
  for (const map of maps) {
    for (const source of JSON.parse(readFileSync(map, "utf8")).sources as string[]) {
      assert.ok(existsSync(resolve(dirname(map), source)), `${map} points at ${source}, not shipped`);
    }
  }
});

/** A script that connects with the installed package and prints the account. */
function connectScript(importLine: string, requireWs: string): string {
  return `${importLine}
${requireWs}
const client = new TidegateClient({ url: process.argv[2], token: process.argv[3], WebSocket });
client.connect().then((welcome) => {
  console.log("welcome " + welcome.account + " " + typeof SUBPROTOCOL);
  client.close();
  process.exit(0);
}, (e) => { console.error(e); process.exit(1); });
`;
}

test("Node imports it as ESM", async () => {
  const file = join(scratch, "esm.mjs");
  writeFileSync(
    file,
    connectScript(
      `import { TidegateClient, SUBPROTOCOL } from "@tidegate/client";`,
      `const { default: WebSocket } = await import(${JSON.stringify(WS_PATH)});`,
    ),
  );
  const { stdout } = await run(process.execPath, [file, broker.wsUrl, await broker.token({})], { cwd: scratch });
  assert.equal(stdout.trim(), "welcome acme string");
});

test("Node requires it as CommonJS", async () => {
  const file = join(scratch, "cjs.cjs");
  writeFileSync(
    file,
    connectScript(
      `const { TidegateClient, SUBPROTOCOL } = require("@tidegate/client");`,
      `const WebSocket = require(${JSON.stringify(WS_PATH)});`,
    ),
  );
  const { stdout } = await run(process.execPath, [file, broker.wsUrl, await broker.token({})], { cwd: scratch });
  assert.equal(stdout.trim(), "welcome acme string");
  // And it is the CommonJS build, not the ESM one loaded some other way.
  const { stdout: resolved } = await run(
    process.execPath,
    ["-e", `console.log(require.resolve("@tidegate/client"))`],
    { cwd: scratch },
  );
  assert.match(resolved.trim(), /dist\/cjs\/index\.js$/);
});

test("a browser loads the bundle with a plain <script type=module>", async () => {
  const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  const bundle = readFileSync(join(installed, pkg.exports["./browser"]));
  const token = await broker.token({});
  const page = `<!doctype html><script type="module">
import { TidegateClient } from "./tidegate.js";
const client = new TidegateClient({ url: ${JSON.stringify(broker.wsUrl)}, token: ${JSON.stringify(token)} });
client.connect().then((w) => { document.body.dataset.account = w.account; },
  (e) => { document.body.dataset.error = String(e); });
</script>`;
  const server: Server = createServer((req, res) => {
    if (req.url === "/tidegate.js") {
      res.writeHead(200, { "content-type": "text/javascript" }).end(bundle);
    } else {
      res.writeHead(200, { "content-type": "text/html" }).end(page);
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  try {
    const tab = await browser.newPage();
    const errors: string[] = [];
    tab.on("pageerror", (e) => errors.push(e.message));
    await tab.goto(`http://127.0.0.1:${port}/`);
    await tab.waitForSelector("body[data-account], body[data-error]", { state: "attached", timeout: 15_000 });
    assert.deepEqual(
      await tab.evaluate(() => ({ ...document.body.dataset })),
      { account: "acme" },
      errors.join("\n"),
    );
  } finally {
    await browser.close();
    await new Promise((r) => server.close(r));
  }
});
