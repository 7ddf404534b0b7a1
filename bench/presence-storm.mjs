// Presence benchmarks (PROTOCOL.md §13, issue 25), on loopback:
//
// 1. A join storm: `--joins` connections (default 1,000) subscribe to one
//    presence channel within one second while `--observers` (20) already
//    watch it. Reports the presence frames each observer received (the
//    goal: a few per second, never one per join), the broker's CPU time
//    over the storm, and, with `--redis`, Redis commands per join
//    (`INFO commandstats` before and after).
// 2. A presence read of 1,000 members (`limit: 1000`): p50/p99 over
//    `--reads` reads on one socket.
//
//   node bench/presence-storm.mjs [--redis | --redis-cluster] [--joins 1000] [--observers 20] [--reads 200]
//
// The broker is TIDEGATE_BIN (default target/debug/tidegate); with
// `--redis` it runs in cluster mode on a redis-server started on a free
// port, with `--redis-cluster` on a three-master Redis Cluster started on
// free ports (commands summed over the masters). Not a timed test:
// numbers go to bench/README.md by hand.
import { spawn, execFileSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
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
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const SHARDED = args.includes("--redis-cluster");
const REDIS = SHARDED || args.includes("--redis");
const JOINS = flag("joins", 1000);
const OBSERVERS = flag("observers", 20);
const READS = flag("reads", 200);
const BIN = process.env.TIDEGATE_BIN ?? join(ROOT, "target", "debug", "tidegate");
const SECRET = "tidegate-sample-secret-do-not-use-in-production";
const CHANNEL = "note:storm";

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
function token(sub) {
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({
    sub,
    exp: Math.floor(Date.now() / 1000) + 3600,
    sub_channels: ["note:*"],
    info: { name: sub },
  })}`;
  return `${body}.${createHmac("sha256", SECRET).update(body).digest("base64url")}`;
}

async function startServer(extra = []) {
  // A port whose cluster bus port (+10000) is free too.
  let port = await freePort();
  while (port > 55000) port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "tidegate-presence-redis-"));
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, ...extra],
    { stdio: "ignore" },
  );
  for (let i = 0; i < 100; i++) {
    try {
      execFileSync("redis-cli", ["-p", String(port), "ping"], { stdio: "pipe" });
      return { port, child };
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error("redis-server did not start");
}

/** One redis-server, or three masters sharing the slots (`--redis-cluster`). */
async function startRedis() {
  if (!SHARDED) {
    const s = await startServer();
    return { port: s.port, ports: [s.port], children: [s.child] };
  }
  const servers = [];
  for (let i = 0; i < 3; i++) servers.push(await startServer(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]));
  const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
  const cli = (port, ...a) => execFileSync("redis-cli", ["-p", String(port), ...a.map(String)]).toString();
  servers.forEach((s, i) => cli(s.port, "cluster", "addslotsrange", ...ranges[i]));
  for (const s of servers.slice(1)) cli(s.port, "cluster", "meet", "127.0.0.1", servers[0].port);
  for (let i = 0; !servers.every((s) => cli(s.port, "cluster", "info").includes("cluster_state:ok")); i++) {
    if (i > 200) throw new Error("the Redis Cluster never reached cluster_state:ok");
    await new Promise((r) => setTimeout(r, 50));
  }
  return { port: servers[0].port, ports: servers.map((s) => s.port), children: servers.map((s) => s.child) };
}

/** Executed commands by name, summed over `ports`. */
function redisCalls(ports) {
  const calls = new Map();
  for (const port of ports) {
    const text = execFileSync("redis-cli", ["-p", String(port), "info", "commandstats"]).toString();
    for (const m of text.matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) calls.set(m[1], (calls.get(m[1]) ?? 0) + Number(m[2]));
  }
  return calls;
}

/** Commands per join between two `redisCalls`: the total and the commands that ran at least once per 10 joins. */
function perJoin(before, after) {
  const by = {};
  let total = 0;
  for (const [name, n] of after) {
    const d = n - (before.get(name) ?? 0);
    total += d;
    if (d >= JOINS / 10) by[name] = Number((d / JOINS).toFixed(2));
  }
  return { total: Number((total / JOINS).toFixed(2)), by };
}

async function startBroker(redisPort) {
  let config = readFileSync(join(ROOT, "config.toml"), "utf8")
    .replace("node_accepts_per_sec = 2000", "node_accepts_per_sec = 100000")
    .replace("ip_handshakes_per_sec = 5", "ip_handshakes_per_sec = 100000")
    .replace("ip_handshake_burst = 20", "ip_handshake_burst = 100000")
    .replace("ip_max_open = 50", "ip_max_open = 100000")
    .replace("ip_max_unfinished = 100", "ip_max_unfinished = 100000")
    .replace("max_members = 1000", `max_members = ${JOINS + OBSERVERS + 10}`)
    // Reads free, so the latency loop is not paced by the socket's budget
    // (frames priced 0 have their own bucket: raised too).
    .replace("presence = 1\n", "presence = 0\n")
    .replace("free_frames_per_sec = 10\n", "free_frames_per_sec = 100000\n")
    .replace("free_frame_burst = 20\n", "free_frame_burst = 100000\n");
  if (redisPort) {
    config = config
      .replace('mode = "memory"', SHARDED ? 'mode = "redis-cluster"' : 'mode = "redis"')
      .replace('redis_url = "redis://127.0.0.1:6379/"', `redis_url = "redis://127.0.0.1:${redisPort}/"`)
      .replace('drain_ms = 10000', 'drain_ms = 300');
  }
  const dir = mkdtempSync(join(tmpdir(), "tidegate-presence-bench-"));
  writeFileSync(join(dir, "config.toml"), config);
  const child = spawn(BIN, ["serve", "--config", join(dir, "config.toml"), "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, TIDEGATE_CLUSTER_SECRET: "bench-cluster-secret-0123456789", RUST_LOG: "warn" },
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

function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, clock ticks of 10 ms
}

/** A socket that has said welcome; `frames` counts presence frames. */
function open(url, sub) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token(sub)}`]);
    const c = { ws, frames: 0, pending: new Map(), id: 0 };
    ws.on("message", (data) => {
      const f = JSON.parse(data.toString());
      if (f.type === "welcome") return resolve(c);
      if (f.id !== undefined && c.pending.has(f.id)) {
        c.pending.get(f.id)(f);
        c.pending.delete(f.id);
      } else if (f.type === "presence_diff" || f.type === "presence_stats") c.frames += 1;
    });
    ws.on("error", reject);
  });
}

function call(c, frame) {
  const id = ++c.id;
  return new Promise((resolve) => {
    c.pending.set(id, resolve);
    c.ws.send(JSON.stringify({ ...frame, id }));
  });
}

async function settle(observers, quietMs = 2500) {
  let last = -1;
  for (;;) {
    const n = observers.reduce((s, o) => s + o.frames, 0);
    if (n === last) return;
    last = n;
    await new Promise((r) => setTimeout(r, quietMs));
  }
}

const redis = REDIS ? await startRedis() : undefined;
const broker = await startBroker(redis?.port);
await new Promise((r) => setTimeout(r, REDIS ? 1500 : 200)); // the bridge's first lease
const observers = [];
for (let i = 0; i < OBSERVERS; i++) {
  const c = await open(broker.url, `observer${i}`);
  await call(c, { type: "subscribe", channel: CHANNEL });
  observers.push(c);
}
await settle(observers, 600);
for (const o of observers) o.frames = 0;
console.error(`${OBSERVERS} observers in; the storm starts`);

const cpu0 = cpuMs(broker.child.pid);
const calls0 = redis ? redisCalls(redis.ports) : undefined;
const started = Date.now();
const joiners = [];
const acks = [];
for (let i = 0; i < JOINS; i++) {
  const due = started + (i * 1000) / JOINS;
  const wait = due - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  acks.push(
    open(broker.url, `user${i}`).then((c) => {
      joiners.push(c);
      return call(c, { type: "subscribe", channel: CHANNEL });
    }),
  );
}
console.error("all joins sent");
const answers = await Promise.all(acks);
console.error("all joins acked");
const stormMs = Date.now() - started;
const refused = answers.filter((a) => a.type !== "ack").length;
await settle(observers);
const cpu1 = cpuMs(broker.child.pid);
const calls1 = redis ? redisCalls(redis.ports) : undefined;
const per = observers.map((o) => o.frames).sort((a, b) => a - b);

// Reads of the whole channel (JOINS + OBSERVERS members), limit 1000.
const reader = observers[0];
const lat = [];
for (let i = 0; i < READS; i++) {
  const t = process.hrtime.bigint();
  const r = await call(reader, { type: "presence", channel: CHANNEL, limit: 1000 });
  lat.push(Number(process.hrtime.bigint() - t) / 1e6);
  if (r.type !== "presence") throw new Error(JSON.stringify(r));
  if (i === 0 && r.members.length !== Math.min(1000, JOINS + OBSERVERS)) throw new Error(`read ${r.members.length} members`);
}
lat.sort((a, b) => a - b);
const pct = (p) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))].toFixed(2);

console.log(
  JSON.stringify(
    {
      mode: SHARDED ? "one node through a 3-master Redis Cluster" : REDIS ? "one node through Redis" : "one node",
      joins: JOINS,
      refused,
      stormMs,
      observers: OBSERVERS,
      presenceFramesPerObserver: { min: per[0], max: per[per.length - 1] },
      brokerCpuMs: Math.round(cpu1 - cpu0),
      redisCommandsPerJoin: redis ? perJoin(calls0, calls1) : null,
      read1000: { reads: READS, p50Ms: pct(50), p99Ms: pct(99) },
    },
    null,
    1,
  ),
);
for (const c of [...observers, ...joiners]) c.ws.terminate();
broker.child.kill("SIGKILL");
for (const c of redis?.children ?? []) c.kill("SIGKILL");
process.exit(0);
