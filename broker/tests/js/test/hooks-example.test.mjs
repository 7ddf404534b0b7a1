// examples/hooks, as a user runs it, against the release broker: the
// example backend (its own cookie sessions, a Standard Webhooks verifier)
// answers the broker's hooks, and examples/hooks/demo.mjs (the SDK in
// Node) logs in, connects without a token, publishes, calls an RPC and
// meets the hooks' refusals. The broker's config is the shipped one plus
// examples/hooks/hooks.toml, pointed at the backend's free port.
// (scripts/test installs the examples' packages and builds the SDK first.)
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { REPO_ROOT, startBroker } from "../lib/broker.mjs";

const EXAMPLE = join(REPO_ROOT, "examples", "hooks");
let backend;
let broker;

before(async () => {
  if (!existsSync(join(REPO_ROOT, "client-sdk-ts", "dist", "index.js"))) {
    throw new Error("client-sdk-ts/dist is missing: run `npm ci && npm run build` in client-sdk-ts");
  }
  const { startBackend } = await import(join(EXAMPLE, "backend.mjs"));
  backend = await startBackend({ port: 0 });
  const block = readFileSync(join(EXAMPLE, "hooks.toml"), "utf8").replaceAll("http://127.0.0.1:9000", backend.url);
  assert.notEqual(block.indexOf(backend.url), -1, "hooks.toml names the backend at 127.0.0.1:9000");
  broker = await startBroker({}, block);
});
after(async () => {
  await broker?.stop();
  await backend?.stop();
});

test("examples/hooks/demo.mjs: a cookie session, a rewritten publish, an RPC and the hooks' refusals", async () => {
  const ws = `${broker.url.replace(/^http/, "ws")}/v1/ws`;
  const { stdout } = await promisify(execFile)(process.execPath, [join(EXAMPLE, "demo.mjs"), ws, backend.url], {
    timeout: 20_000,
  });
  assert.deepEqual(stdout.trim().split("\n"), [
    "ann: joined user:ann at the handshake",
    'ann: whoami {"name":"ann","transport":"websocket"}',
    "ann: room:lobby got 200 characters from ann (the publish hook trimmed them)",
    "ann: empty publish empty_message (say something)",
    "ann: subscribed to room:vip",
    "bob: room:vip not_invited (room:vip is for ann)",
    "bob: rpc fly no_such_method (no method fly)",
    "no cookie: connect login_required (log in first (POST /login)), HTTP 403",
  ]);
  // Every call the broker made was signed (the backend verified each) and
  // each event of hooks.toml was asked.
  const events = new Set(backend.calls.map((c) => c.event));
  for (const e of ["connect", "subscribe", "publish", "rpc"]) assert.ok(events.has(e), `a ${e} call`);
  const connect = backend.calls.find((c) => c.event === "connect" && c.headers?.cookie);
  assert.equal(connect.headers.origin, backend.url, "the passed headers include the page's Origin");
  assert.equal(connect.client.sub, undefined, "no identity before the connect hook names it");
});
