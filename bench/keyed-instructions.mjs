// What an idempotency key (§17, issue 41) costs the publish path, in
// instructions: the release broker runs under `valgrind --tool=callgrind`
// and every phase is a FIXED number of publishes, so the count per publish
// does not depend on what else the (shared) machine is doing, unlike
// wall-clock throughput or CPU time.
//
//   node --experimental-websocket bench/keyed-instructions.mjs \
//     [--bin target/release/tidegate] [--subscribers 1] [--count 2000] \
//     [--in-flight 8] [--prefill 100000] [--rounds 2] [--redis] [--out DIR]
//
// One broker (with `--redis`: in cluster mode on a redis-server of its own,
// also under callgrind, so the script's share is counted too), S WebSocket
// subscribers of one channel, one publisher socket and `--in-flight` HTTP
// keep-alive connections. First, uninstrumented, `--prefill` keyed socket
// publishes fill the idempotency table to its cap (the default 100,000),
// as a node that has published for a while holds it, so every keyed
// publish measured also evicts. Then, per round, the four phases in turn
// (http, http keyed, ws, ws keyed), each between a `callgrind_control -z`
// and a `-d`: instructions (Ir) of the whole process per publish, raw and
// net of the process's idle rate (measured once, 5 s without publishes,
// times the phase's length). The window is set to a day (see below). Every
// keyed publish carries a key never used before (a first publish, never a
// cheaper duplicate). Prints one JSON object; the dumps stay in `--out`
// for `callgrind_annotate` (where the instructions went).
//
// Needs valgrind (apt-get install valgrind) and redis-server for --redis.
// Not a test: numbers go to bench/README.md.
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createHmac } from "node:crypto";
import { createServer } from "node:net";

// (Not bench/attacks/harness.mjs: that one loads the `ws` package.)
const SAMPLE_SECRET = "tidegate-sample-secret-do-not-use-in-production";
const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
function token(sub) {
  const exp = Math.floor(Date.now() / 1000) + 3600;
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ sub, exp, sub_channels: ["*"], pub_channels: ["*"] })}`;
  return `${body}.${createHmac("sha256", SAMPLE_SECRET).update(body).digest("base64url")}`;
}

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const BIN = opt("bin", process.env.TIDEGATE_BIN ?? join(ROOT, "target", "release", "tidegate"));
const SUBSCRIBERS = Number(opt("subscribers", 1));
const COUNT = Number(opt("count", 2000));
const IN_FLIGHT = Number(opt("in-flight", 8));
const PREFILL = Number(opt("prefill", 100_000));
const ROUNDS = Number(opt("rounds", 2));
const REDIS = args.includes("--redis");
const OUT = opt("out", mkdtempSync(join(tmpdir(), "keyed-instr-")));
const CHANNEL = "doc:keyed";
const API_KEY = "tidegate-sample-publish-key";
const DATA = JSON.stringify("x".repeat(62)); // 64 bytes of JSON, as the bench's default
mkdirSync(OUT, { recursive: true });

if (typeof WebSocket === "undefined") throw new Error("run node with --experimental-websocket (Node 20) or Node 22+");

const started = [];
const kill = () => started.forEach((c) => { try { process.kill(c.pid, "SIGKILL"); } catch {} });
process.on("exit", kill);

/** `cmd` under callgrind, instrumentation off until `callgrind_control -i on`. */
function underCallgrind(name, cmd, cmdArgs, env = {}) {
  const child = spawn("valgrind", [
    "--tool=callgrind", "--instr-atstart=no", `--callgrind-out-file=${join(OUT, `${name}.%p`)}`,
    cmd, ...cmdArgs,
  ], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  started.push(child);
  let err = "";
  child.stderr.on("data", (d) => (err = (err + d).slice(-4000)));
  child.on("exit", (code) => { if (code !== null && code !== 0) console.error(`${name} exited ${code}: ${err}`); });
  return child;
}

const control = (pid, ...flags) => execFileSync("callgrind_control", [...flags, String(pid)], { stdio: "pipe" }).toString();

/** The Ir total of the newest dump of `pid` (after `-d`). */
function lastDumpIr(pid, name) {
  const files = readdirSync(OUT).filter((f) => f.startsWith(`${name}.${pid}.`));
  const newest = files.sort((a, b) => Number(a.split(".").pop()) - Number(b.split(".").pop())).pop();
  const text = readFileSync(join(OUT, newest), "utf8");
  const m = text.match(/^(?:summary|totals): (\d+)/m);
  return { ir: Number(m[1]), file: newest };
}

async function startRedis() {
  const port = await freePort();
  const child = underCallgrind("redis", "redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
  return { child, port };
}

async function startBroker(redisPort) {
  const port = await freePort();
  const grpcPort = await freePort();
  let config = readFileSync(join(ROOT, "config.toml"), "utf8")
    .replace(/^workers = 0$/m, "workers = 1")
    // A day: under callgrind the run outlasts the default 5 minutes, and
    // the prefill's keys expiring mid-run would be counted in the phases
    // they expire in. (At the bench's rates the cap, not the window, is
    // what retires keys: every keyed publish measured also evicts one.)
    .replace(/^idempotency_window_ms = \d+$/m, "idempotency_window_ms = 86400000")
    .replace('[accounts.acme]\nplan = "free"', '[accounts.acme]\nplan = "bench_publisher"')
    // Room for `--subscribers` sockets from one address (all on loopback).
    .replace(/^ip_handshakes_per_sec = \d+$/m, "ip_handshakes_per_sec = 1000")
    .replace(/^ip_handshake_burst = \d+$/m, "ip_handshake_burst = 1000")
    .replace(/^ip_max_open = \d+$/m, "ip_max_open = 1000")
    .replace(/^ip_max_connections = \d+$/m, "ip_max_connections = 1000");
  if (redisPort) {
    config = config
      .replace('mode = "memory"', 'mode = "redis"')
      .replace('redis_url = "redis://127.0.0.1:6379/"', `redis_url = "redis://127.0.0.1:${redisPort}/"`);
  }
  // The publisher's own budget, as the load generator's `bench_publisher`.
  config += `
[plans.bench_publisher]
messages_per_sec = 1000000.0
burst = 1000000
account_messages_per_sec = 1000000.0
account_burst = 1000000
max_connections = 1000
handshake_burst = 1000
`;
  const dir = mkdtempSync(join(tmpdir(), "keyed-instr-cfg-"));
  writeFileSync(join(dir, "config.toml"), config);
  const child = underCallgrind("broker", BIN, [
    "serve", "--config", join(dir, "config.toml"), "--listen", `127.0.0.1:${port}`, "--grpc-listen", `127.0.0.1:${grpcPort}`,
  ], { RUST_LOG: "warn", TIDEGATE_CLUSTER_SECRET: "keyed-instructions-cluster-secret-0123456789" });
  await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => /tidegate listening on/.test(d.toString()) && resolve());
    child.on("exit", (code) => reject(new Error(`broker exited ${code}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (;;) {
    const r = await fetch(`${base}/readyz`).then((r) => r.status, () => 0);
    if (r === 200) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, port, base, ws: `ws://127.0.0.1:${port}/v1/ws` };
}

/** A socket of `sub`, once welcomed; frames after the welcome go to `onFrame`. */
function openSocket(url, sub, onFrame) {
  const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token(sub)}`]);
  return new Promise((resolve, reject) => {
    let welcomed = false;
    ws.onmessage = (e) => {
      const f = JSON.parse(e.data);
      if (!welcomed) {
        if (f.type !== "welcome") return reject(new Error(e.data));
        welcomed = true;
        return resolve(ws);
      }
      onFrame(f);
    };
    ws.onerror = (e) => reject(new Error(`socket ${sub}: ${e.message ?? e}`));
  });
}

let nextKey = 0;
const freshKey = () => `k${process.pid}-${nextKey++}`;

/** `n` publishes on the publisher socket, `IN_FLIGHT` ahead of their acks. */
function socketPhase(pub, n, keyed) {
  return new Promise((resolve, reject) => {
    let sent = 0;
    let acked = 0;
    const send = () => {
      const f = { type: "publish", channel: CHANNEL, data: "x".repeat(62), id: sent };
      if (keyed) f.key = freshKey();
      sent++;
      pub.send(JSON.stringify(f));
    };
    pub.onFrameHandler = (f) => {
      if (f.type !== "ack" || typeof f.seq !== "number" || f.duplicate) return reject(new Error(JSON.stringify(f)));
      acked++;
      if (acked === n) return resolve();
      if (sent < n) send();
    };
    for (let i = 0; i < Math.min(IN_FLIGHT, n); i++) send();
  });
}

// Renewed before each HTTP phase (see below): the node closes idle
// keep-alive connections, and a request on a closed one fails.
let agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });

function httpPublish(port, keyed) {
  return new Promise((resolve, reject) => {
    const body = `{"channel":"${CHANNEL}","data":${DATA}}`;
    const headers = { authorization: `Bearer ${API_KEY}`, "content-type": "application/json", "content-length": body.length };
    if (keyed) headers["idempotency-key"] = freshKey();
    const req = http.request({ host: "127.0.0.1", port, path: "/v1/publish", method: "POST", agent, headers }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => {
        const a = res.statusCode === 200 ? JSON.parse(text) : null;
        if (!a || typeof a.seq !== "number" || a.duplicate) reject(new Error(`${res.statusCode} ${text}`));
        else resolve();
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

async function httpPhase(port, n, keyed) {
  let next = 0;
  const lane = async () => {
    while (next < n) {
      next++;
      await httpPublish(port, keyed);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
}

const redis = REDIS ? await startRedis() : null;
if (redis) {
  // Wait until it accepts connections.
  const { connect } = await import("node:net");
  for (;;) {
    const ok = await new Promise((r) => {
      const s = connect(redis.port, "127.0.0.1", () => (s.destroy(), r(true)));
      s.on("error", () => r(false));
    });
    if (ok) break;
    await new Promise((r) => setTimeout(r, 50));
  }
}
const broker = await startBroker(redis?.port);
let delivered = 0;
for (let i = 0; i < SUBSCRIBERS; i++) {
  const ws = await openSocket(broker.ws, `reader${i % 64}`, (f) => f.type === "message" && delivered++);
  await new Promise((resolve) => {
    const prev = ws.onmessage;
    ws.onmessage = (e) => {
      const f = JSON.parse(e.data);
      if (f.type === "ack" && f.id === "s") {
        ws.onmessage = prev;
        resolve();
      }
    };
    ws.send(JSON.stringify({ type: "subscribe", channel: CHANNEL, id: "s" }));
  });
}
const pub = await openSocket(broker.ws, "acme", (f) => pub.onFrameHandler?.(f));

// Warm every path, then fill the table to its cap (not counted).
await httpPhase(broker.port, 200, false);
await httpPhase(broker.port, 200, true);
await socketPhase(pub, 200, false);
await socketPhase(pub, Math.max(200, PREFILL), true);

const phases = {
  http: () => httpPhase(broker.port, COUNT, false),
  http_keyed: () => httpPhase(broker.port, COUNT, true),
  ws: () => socketPhase(pub, COUNT, false),
  ws_keyed: () => socketPhase(pub, COUNT, true),
};
const procs = [["broker", broker.child.pid], ...(redis ? [["redis", redis.child.pid]] : [])];
for (const [, pid] of procs) control(pid, "--instr=on");
// What each process runs per second with no publishes (timers, the
// bridge's flushes, Redis's cron): under callgrind a phase lasts long
// enough for this to matter, so it is subtracted per phase
// (`ir_per_publish_net`).
const IDLE_MS = 5000;
const idle = {};
for (const [, pid] of procs) control(pid, "-z");
const idleStart = Date.now();
await new Promise((r) => setTimeout(r, IDLE_MS));
for (const [name, pid] of procs) {
  control(pid, "--dump=idle");
  idle[name] = lastDumpIr(pid, name).ir / ((Date.now() - idleStart) / 1000);
}
const per = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const [phase, run] of Object.entries(phases)) {
    if (phase.startsWith("http")) {
      // Fresh connections, opened before the count starts.
      agent.destroy();
      agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
      await httpPhase(broker.port, IN_FLIGHT, false);
    }
    for (const [, pid] of procs) control(pid, "-z");
    const t0 = Date.now();
    await run();
    const secs = (Date.now() - t0) / 1000;
    for (const [name, pid] of procs) {
      control(pid, `--dump=${phase}-${round}`);
      const { ir, file } = lastDumpIr(pid, name);
      ((per[name] ??= {})[phase] ??= []).push({
        ir_per_publish: Math.round(ir / COUNT),
        ir_per_publish_net: Math.round((ir - idle[name] * secs) / COUNT),
        secs,
        file,
      });
    }
  }
}
const mean = (xs, f) => Math.round(xs.reduce((a, x) => a + x[f], 0) / xs.length);
const summary = {};
for (const [name, phasesOf] of Object.entries(per)) {
  for (const f of ["ir_per_publish", "ir_per_publish_net"]) {
    const m = Object.fromEntries(Object.entries(phasesOf).map(([p, xs]) => [p, mean(xs, f)]));
    summary[`${name}_${f}`] = {
      ...m,
      key_cost_pct: {
        http: Math.round((m.http_keyed / m.http - 1) * 1000) / 10,
        ws: Math.round((m.ws_keyed / m.ws - 1) * 1000) / 10,
      },
    };
  }
  summary[`${name}_idle_ir_per_sec`] = Math.round(idle[name]);
}
console.log(JSON.stringify({
  bin: BIN, subscribers: SUBSCRIBERS, count: COUNT, in_flight: IN_FLIGHT, prefill: PREFILL, rounds: ROUNDS,
  redis: REDIS, delivered, out: OUT, summary, rounds_detail: per,
}, null, 1));
kill();
process.exit(0);
