// Backend hooks under load (PROTOCOL.md §15, issue 39), on loopback. A
// backend of node:http in this process answers the broker's hook calls and
// counts them; each part starts a fresh broker with its own `[[hooks]]`.
//
// 1. storm-cached: `--clients` sockets (default 2,000) of `--users` users
//    (400: five tabs each) each subscribe to `--channels` hooked channels
//    (20), all disconnect, and all reconnect and subscribe again, with
//    `cache_ms` on. Goal: backend calls <= distinct (user, channel).
// 2. storm-paced: the same storm with `cache_ms = 0` and a small budget
//    (`rate_per_sec` 200, `burst` 100). Goal: calls <= burst + rate x the
//    storm's seconds; the rest refused `hook_unavailable` (not retried:
//    at 200 calls a second the storm would take minutes).
// 3. dead-backend: the backend accepts and never answers (`timeout_ms`
//    300, breaker 5 failures / 5 s). 200 subscribes to a hooked channel,
//    10 at a time: each waits at most `timeout_ms` while the breaker is
//    closed and nothing once it is open, and the backend sees the few calls
//    before it opened. Meanwhile, and before, subscribe latency on an
//    unhooked channel (p50/p99).
// 4. overhead: handshake + subscribe, one at a time, `--rounds` (300) each
//    to a hooked channel whose hook answers at once and to an unhooked one,
//    interleaved: p50/p99 of both.
//
//   TIDEGATE_BIN=target/release/tidegate node bench/hooks-storm.mjs [--only storm-cached,...]
//
// Not a timed test: numbers go to bench/README.md by hand.
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(ROOT, "client-sdk-ts", "package.json"));
const WebSocket = require("ws");

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const CLIENTS = Number(flag("clients", 2000));
const USERS = Number(flag("users", 400));
const CHANNELS = Number(flag("channels", 20));
const ROUNDS = Number(flag("rounds", 300));
const ONLY = flag("only", "storm-cached,storm-paced,dead-backend,overhead").split(",");
const BIN = process.env.TIDEGATE_BIN ?? join(ROOT, "target", "release", "tidegate");
const SECRET = "tidegate-sample-secret-do-not-use-in-production";
const HOOK_SECRET = "bench-hook-secret-0123456789abcdef";

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
function token(sub) {
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({
    sub,
    exp: Math.floor(Date.now() / 1000) + 3600,
    sub_channels: ["free:*"],
  })}`;
  return `${body}.${createHmac("sha256", SECRET).update(body).digest("base64url")}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Number(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))].toFixed(2));
};

/**
 * The backend, in a process of its own (so the 2,000 clients of this one
 * do not slow it): answers `subscribe` with `{}` at once, or never
 * (`dead`); `GET /count` reports the calls it received.
 */
async function backend(mode) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--serve-backend", mode.dead ? "dead" : "fast"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise((resolve, reject) => {
    child.stdout.once("data", (d) => resolve(Number(d.toString().trim())));
    child.on("exit", (code) => reject(new Error(`backend exited ${code}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  const calls = async () => (await fetch(`${base}/count`)).json();
  const stop = () => new Promise((r) => (child.once("exit", r), child.kill("SIGTERM")));
  return { url: `${base}/hook`, calls, stop };
}

/** The backend process's body (`--serve-backend fast|dead`). */
async function serveBackend(mode) {
  let total = 0;
  const server = createServer((req, res) => {
    if (req.url === "/count") {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify({ total }));
    }
    req.resume();
    req.on("end", () => {
      total += 1;
      if (mode === "dead") return; // accepted, never answered
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"result":{}}');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  process.stdout.write(`${server.address().port}\n`);
}

async function startBroker(hook) {
  const config =
    readFileSync(join(ROOT, "config.toml"), "utf8")
      .replace("node_accepts_per_sec = 2000", "node_accepts_per_sec = 100000")
      .replace("ip_handshakes_per_sec = 5", "ip_handshakes_per_sec = 100000")
      .replace("ip_handshake_burst = 20", "ip_handshake_burst = 100000")
      .replace("ip_max_open = 50", "ip_max_open = 100000")
      .replace("ip_max_unfinished = 100", "ip_max_unfinished = 100000")
      .replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n")
      .replace("account_burst = 200\n", "account_burst = 100000\n")
      .replace("handshake_burst = 10\n", "handshake_burst = 100000\n")
      .replace("handshake_refill_per_sec = 0.5\n", "handshake_refill_per_sec = 100000\n")
      .replace("messages_per_sec = 20\n", "messages_per_sec = 100000\n")
      .replace("burst = 20\n", "burst = 100000\n") +
    `\n[[hooks]]\nid = "bench"\nurl = "${hook.url}"\nevents = ["subscribe"]\nchannels = ["doc:*"]\nsecret = "${HOOK_SECRET}"\n${hook.toml}\n`;
  const dir = mkdtempSync(join(tmpdir(), "tidegate-hooks-bench-"));
  writeFileSync(join(dir, "config.toml"), config);
  const child = spawn(BIN, ["serve", "--config", join(dir, "config.toml"), "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  const url = await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      const m = d.toString().match(/tidegate listening on (\S+)/);
      if (m) resolve(m[1].replace("http://", "ws://") + "/v1/ws");
    });
    child.on("exit", (code) => reject(new Error(`broker exited ${code}`)));
  });
  return { child, url };
}

/** A socket that has said welcome; `call` sends a frame and resolves with its answer. */
function open(url, sub) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token(sub)}`]);
    const c = { ws, pending: new Map(), id: 0 };
    c.call = (frame) =>
      new Promise((res) => {
        const id = ++c.id;
        c.pending.set(id, res);
        ws.send(JSON.stringify({ ...frame, id }));
      });
    ws.on("message", (data) => {
      const f = JSON.parse(data.toString());
      if (f.type === "welcome") return resolve(c);
      // A frame names its id, or a `rate_limited` error lists the ids dropped.
      for (const id of f.ids ?? [f.id]) {
        if (id !== undefined && c.pending.has(id)) {
          c.pending.get(id)(f);
          c.pending.delete(id);
        }
      }
    });
    ws.on("error", reject);
    ws.on("unexpected-response", (_req, res) => reject(new Error(`handshake ${res.statusCode}`)));
  });
}

const close = (c) => new Promise((r) => (c.ws.readyState === WebSocket.CLOSED ? r() : (c.ws.once("close", r), c.ws.close())));

/**
 * Subscribes as the SDK does: a `hook_unavailable` refusal (the backend's
 * budget or breaker) is asked again after its `retryAfterMs` plus up to a
 * second of jitter, at most 30 times; `outcomes.retried` counts the retries.
 */
async function subscribe(c, channel, outcomes, retry) {
  for (let attempt = 0; ; attempt++) {
    const a = await c.call({ type: "subscribe", channel });
    if (a.code !== "hook_unavailable" || !retry || attempt >= 30) return a;
    outcomes.retried = (outcomes.retried ?? 0) + 1;
    await sleep((a.retryAfterMs ?? 1000) + Math.random() * 1000);
  }
}

/** Opens every client (in waves of 200), subscribes each to every hooked channel; outcome counts. */
async function stormRound(url, retry) {
  const outcomes = {};
  const clients = [];
  for (let i = 0; i < CLIENTS; i += 200) {
    const wave = [];
    for (let j = i; j < Math.min(CLIENTS, i + 200); j++) wave.push(open(url, `user${j % USERS}`));
    clients.push(...(await Promise.all(wave)));
  }
  await Promise.all(
    clients.map(async (c) => {
      const answers = await Promise.all(Array.from({ length: CHANNELS }, (_, k) => subscribe(c, `doc:${k}`, outcomes, retry)));
      for (const a of answers) {
        const o = a.type === "error" ? a.code : a.type;
        outcomes[o] = (outcomes[o] ?? 0) + 1;
      }
    }),
  );
  return { clients, outcomes };
}

async function storm(name, toml, retry) {
  const hook = await backend({});
  const broker = await startBroker({ url: hook.url, toml });
  const t0 = performance.now();
  const first = await stormRound(broker.url, retry);
  await Promise.all(first.clients.map(close));
  const second = await stormRound(broker.url, retry);
  const secs = (performance.now() - t0) / 1000;
  await Promise.all(second.clients.map(close));
  broker.child.kill("SIGTERM");
  const { total } = await hook.calls();
  await hook.stop();
  const distinct = new Set();
  for (let j = 0; j < CLIENTS; j++) for (let k = 0; k < CHANNELS; k++) distinct.add(`user${j % USERS} doc:${k}`);
  return {
    part: name,
    clients: CLIENTS,
    users: USERS,
    channels: CHANNELS,
    subscribes: 2 * CLIENTS * CHANNELS,
    distinct_user_channel: distinct.size,
    backend_calls: total,
    storm_secs: Number(secs.toFixed(2)),
    first_round: first.outcomes,
    reconnect_round: second.outcomes,
  };
}

async function deadBackend() {
  const hook = await backend({ dead: true });
  const broker = await startBroker({
    url: hook.url,
    toml: "timeout_ms = 300\nbreaker_failures = 5\nbreaker_open_ms = 5000\nmax_in_flight = 64\n",
  });
  const bystander = await open(broker.url, "bystander");
  const unhooked = async (n) => {
    const lat = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await bystander.call({ type: "subscribe", channel: `free:${i % 50}` });
      lat.push(performance.now() - t);
      await bystander.call({ type: "unsubscribe", channel: `free:${i % 50}` });
    }
    return lat;
  };
  const before = await unhooked(300);
  const sockets = await Promise.all(Array.from({ length: 10 }, (_, i) => open(broker.url, `dead${i}`)));
  const hooked = [];
  const during = unhooked(300);
  for (let i = 0; i < 20; i++) {
    await Promise.all(
      sockets.map(async (c, j) => {
        const t = performance.now();
        const a = await c.call({ type: "subscribe", channel: `doc:${i * 10 + j}` });
        hooked.push({ ms: performance.now() - t, code: a.code ?? a.type });
      }),
    );
  }
  const unhookedDuring = await during;
  await Promise.all([...sockets, bystander].map(close));
  const closedWaits = hooked.filter((h) => h.ms > 50).map((h) => h.ms);
  const openWaits = hooked.filter((h) => h.ms <= 50).map((h) => h.ms);
  broker.child.kill("SIGTERM");
  const { total } = await hook.calls();
  await hook.stop();
  const codes = {};
  for (const h of hooked) codes[h.code] = (codes[h.code] ?? 0) + 1;
  return {
    part: "dead-backend",
    hooked_subscribes: hooked.length,
    codes,
    backend_calls: total,
    waited_for_timeout: { n: closedWaits.length, max_ms: closedWaits.length ? Number(Math.max(...closedWaits).toFixed(1)) : null },
    answered_at_once: { n: openWaits.length, p99_ms: pct(openWaits, 99) },
    unhooked_subscribe_ms: {
      before: { p50: pct(before, 50), p99: pct(before, 99) },
      during: { p50: pct(unhookedDuring, 50), p99: pct(unhookedDuring, 99) },
    },
  };
}

async function overhead() {
  const hook = await backend({});
  const broker = await startBroker({ url: hook.url, toml: "" });
  const lat = { hooked: [], unhooked: [] };
  for (let i = 0; i < ROUNDS; i++) {
    for (const kind of i % 2 ? ["hooked", "unhooked"] : ["unhooked", "hooked"]) {
      const t = performance.now();
      const c = await open(broker.url, `o${i % 50}`);
      const a = await c.call({ type: "subscribe", channel: kind === "hooked" ? `doc:${i}` : `free:${i}` });
      lat[kind].push(performance.now() - t);
      if (a.type === "error") throw new Error(`overhead: ${JSON.stringify(a)}`);
      await close(c);
    }
  }
  broker.child.kill("SIGTERM");
  const { total } = await hook.calls();
  await hook.stop();
  return {
    part: "overhead",
    rounds: ROUNDS,
    handshake_plus_subscribe_ms: {
      unhooked: { p50: pct(lat.unhooked, 50), p99: pct(lat.unhooked, 99) },
      hooked: { p50: pct(lat.hooked, 50), p99: pct(lat.hooked, 99) },
    },
    backend_calls: total,
  };
}

const serving = args.indexOf("--serve-backend");
if (serving >= 0) {
  await serveBackend(args[serving + 1]);
} else {
  await main();
}

async function main() {
const results = [];
const push = results.push.bind(results);
results.push = (r) => (console.error(JSON.stringify(r)), push(r));
if (ONLY.includes("storm-cached")) results.push(await storm("storm-cached", "cache_ms = 600000\nrate_per_sec = 100000\nburst = 100000\nmax_in_flight = 256\n", true));
if (ONLY.includes("storm-paced")) {
  const r = await storm("storm-paced", "cache_ms = 0\nrate_per_sec = 200\nburst = 100\nmax_in_flight = 64\ntimeout_ms = 1000\n", false);
  r.allowed_by_budget = Math.floor(100 + 200 * r.storm_secs);
  results.push(r);
}
if (ONLY.includes("dead-backend")) results.push(await deadBackend());
if (ONLY.includes("overhead")) results.push(await overhead());
console.log(JSON.stringify({ bench: "hooks-storm", binary: BIN, results }, null, 2));
}
