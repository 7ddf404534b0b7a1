// Measures cross-node fan-out and the Redis cost per published message.
//
//   node scripts/measure-cluster.mjs [--subs 200] [--seconds 5] [--payload 64]
//        [--channels 24] [--publishers 4] [--only memory-1,shards-3,...]
//
// Runs these set-ups one after the other, on loopback, each for --seconds:
//   fan-out (one channel, --subs subscribers, one publisher, 64 in flight):
//   memory-1   one node, single-node mode (no Redis)
//   redis-1    one node through Redis
//   redis-2    two nodes through Redis, subscribers split between them,
//              the publisher on the first
//   rcluster-1 one node through a three-master Redis Cluster
//              (cluster.mode = "redis-cluster"; one channel, so one shard)
//   shard1-1   one node through a one-master Redis Cluster (the issue's
//              "one shard" next to memory-1)
//   fleet publish rate (two nodes, --channels channels spread over the
//   slots, one subscriber per channel on each node, --publishers publisher
//   sockets split over the nodes, each 64 in flight, round-robin over the
//   channels):
//   fleet-memory  one node, single-node mode, same load (the reference)
//   shards-1, shards-2, shards-3  two nodes on a Redis Cluster of 1, 2, 3
//              masters
// and prints, for each, messages published per second, frames delivered per
// second, and Redis commands per 1,000 published messages (from Redis's own
// INFO commandstats, reset before the run; every master summed). Needs
// target/release/tidegate, redis-server, and `npm ci` in client-sdk-ts (for
// the `ws` package). Starts everything it uses on free ports and kills only
// what it started.

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";

const require = createRequire(new URL("../client-sdk-ts/package.json", import.meta.url));
const WebSocket = require("ws");
const root = new URL("..", import.meta.url).pathname;
const bin = process.env.TIDEGATE_BIN ?? join(root, "target/release/tidegate");

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SUBS = arg("subs", 200);
const SECONDS = arg("seconds", 5);
const PAYLOAD = arg("payload", 64);
const CHANNELS = arg("channels", 24);
const PUBLISHERS = arg("publishers", 4);
const onlyAt = process.argv.indexOf("--only");
const ONLY = onlyAt > 0 ? new Set(process.argv[onlyAt + 1].split(",")) : null;
const wanted = (label) => !ONLY || ONLY.has(label);
const WINDOW = 64; // publishes in flight

const children = [];
const cleanup = () => children.forEach((c) => c.kill("SIGKILL"));
process.on("exit", cleanup);

const freePort = () =>
  new Promise((res) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });

function startRedis(port) {
  const c = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--logfile", ""]);
  children.push(c);
  return new Promise((res) => c.stdout.on("data", (d) => String(d).includes("Ready to accept") && res(c)));
}

function redisCmd(port, ...args) {
  return new Promise((res, rej) => {
    const s = net.connect(port, "127.0.0.1");
    const wire = `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join("");
    let buf = "";
    s.on("data", (d) => {
      buf += d;
      if (buf.endsWith("\r\n") && (buf[0] !== "$" || buf.split("\r\n").length >= 3)) {
        s.end();
        res(buf);
      }
    });
    s.on("error", rej);
    s.write(wire);
  });
}

/// CPU seconds (user + system) each Redis server has used so far.
async function redisCpu(ports) {
  const out = [];
  for (const port of [ports].flat()) {
    const info = await redisCmd(port, "INFO", "cpu");
    const get = (k) => Number(info.match(new RegExp(`${k}:([0-9.]+)`))?.[1] ?? 0);
    out.push(get("used_cpu_user") + get("used_cpu_sys"));
  }
  return out;
}

async function commandCount(ports) {
  let total = 0;
  const by = {};
  for (const port of [ports].flat()) {
    const info = await redisCmd(port, "INFO", "commandstats");
    for (const m of info.matchAll(/cmdstat_([\w|]+):calls=(\d+)/g)) {
      // The measurement's own reads and the clients' topology queries do
      // not count; `cluster|myid` is the publish script's fence and does.
      const topology = m[1].startsWith("cluster") && m[1] !== "cluster|myid";
      if (m[1] === "info" || m[1].startsWith("config") || topology) continue;
      by[m[1]] = (by[m[1]] ?? 0) + Number(m[2]);
      total += Number(m[2]);
    }
  }
  return { total, by };
}

/// `masters` cluster-enabled masters sharing the slots evenly; resolves when
/// every node reports cluster_state:ok. Returns their ports.
async function startRedisCluster(dir, masters = 3) {
  const ports = [];
  for (let i = 0; i < masters; i++) {
    let port;
    do port = await freePort(); while (port > 55000);
    const c = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
      "--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`, "--dir", dir, "--logfile", ""]);
    children.push(c);
    await new Promise((res) => c.stdout.on("data", (d) => String(d).includes("Ready to accept") && res()));
    ports.push(port);
  }
  for (let i = 0; i < masters; i++) {
    const from = Math.floor((16384 * i) / masters);
    const to = Math.floor((16384 * (i + 1)) / masters) - 1;
    await redisCmd(ports[i], "CLUSTER", "ADDSLOTSRANGE", from, to);
  }
  for (const p of ports.slice(1)) await redisCmd(p, "CLUSTER", "MEET", "127.0.0.1", ports[0]);
  for (const p of ports) {
    while (!(await redisCmd(p, "CLUSTER", "INFO")).includes("cluster_state:ok")) {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return ports;
}

function config(dir, name, id, redisPort, mode = "redis") {
  let text = readFileSync(join(root, "config.toml"), "utf8")
    .replace('id = "n1"', `id = "${id}"`)
    .replace("workers = 0", "workers = 1")
    .replace("ip_handshakes_per_sec = 5", "ip_handshakes_per_sec = 100000")
    .replace("ip_handshake_burst = 20", "ip_handshake_burst = 100000")
    .replace("ip_max_open = 50", "ip_max_open = 100000");
  if (redisPort) {
    text = text
      .replace('mode = "memory"', `mode = "${mode}"`)
      .replace('redis_url = "redis://127.0.0.1:6379/"', `redis_url = "redis://127.0.0.1:${redisPort}/"`)
      .replace('\nsecret = ""', '\nsecret = "measure-cluster-secret-0123"');
  }
  // Only the publisher's own budget is raised.
  text += `
[plans.publisher]
messages_per_sec = 1000000
burst = 1000000
account_messages_per_sec = 1000000
account_burst = 1000000
account_sample_every = 25
max_subscriptions = 100
outbound_high_water_bytes = 1048576
[plans.publisher.costs]
max_single = 20
`;
  const file = join(dir, `${name}.toml`);
  writeFileSync(file, text);
  return file;
}

function startNode(file) {
  const c = spawn(bin, ["serve", "--config", file, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "ignore"] });
  children.push(c);
  return new Promise((res) =>
    c.stdout.on("data", (d) => {
      const m = String(d).match(/listening on http:\/\/(\S+)/);
      if (m) res({ child: c, addr: m[1] });
    }),
  );
}

function token(file, account, plan) {
  return new Promise((res) => {
    const args = ["token", "--config", file, "--account", account, "--sub", "bench:*", "--pub", "bench:*"];
    if (plan) args.push("--plan", plan);
    const c = spawn(bin, args);
    let out = "";
    c.stdout.on("data", (d) => (out += d));
    c.on("exit", () => res(out.trim()));
  });
}

function open(addr, tok) {
  return new Promise((res, rej) => {
    const ws = new WebSocket(`ws://${addr}/v1/ws`, ["tidegate.v1", `bearer.${tok}`]);
    ws.once("message", () => res(ws)); // welcome
    ws.once("error", rej);
  });
}

async function ready(addr) {
  for (;;) {
    const r = await fetch(`http://${addr}/readyz`).catch(() => null);
    if (r?.status === 200) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/// One measured run. `channels`: the channels published on; subscribers
/// are spread round-robin over the nodes and the channels; publishers over
/// the nodes, each round-robin over the channels.
async function run(label, nodes, file, redisPort, { channels = ["bench:fan"], subs = SUBS, publishers = 1 } = {}) {
  for (const n of nodes) await ready(n.addr);
  const sockets = [];
  const subscribersOf = new Map(channels.map((c) => [c, 0]));
  let delivered = 0;
  for (let i = 0; i < subs; i++) {
    const n = nodes[i % nodes.length];
    const channel = channels[Math.floor(i / nodes.length) % channels.length];
    // Eight sockets per account: the default connection cap stays on.
    const ws = await open(n.addr, await token(file, `${label}-sub${Math.floor(i / 8)}`));
    await new Promise((res) => {
      ws.on("message", (raw) => {
        const s = raw.toString();
        if (s.startsWith('{"type":"message"')) delivered++;
        else if (s.includes('"ack"')) res();
      });
      ws.send(JSON.stringify({ type: "subscribe", channel, id: 1 }));
    });
    subscribersOf.set(channel, subscribersOf.get(channel) + 1);
    sockets.push(ws);
  }
  const pubs = [];
  for (let j = 0; j < publishers; j++) {
    const ws = await open(nodes[j % nodes.length].addr, await token(file, `${label}-publisher${j}`, "publisher"));
    pubs.push(ws);
    sockets.push(ws);
  }
  const data = JSON.stringify("x".repeat(Math.max(0, PAYLOAD - 2)));
  const before = redisPort ? await commandCount(redisPort) : null;
  const cpuBefore = redisPort ? await redisCpu(redisPort) : null;
  let published = 0;
  let expected = 0;
  const end = Date.now() + SECONDS * 1000;
  const t0 = Date.now();
  delivered = 0;
  await Promise.all(
    pubs.map(
      (pub, j) =>
        new Promise((done) => {
          let inFlight = 0;
          let id = 0;
          const sentOn = new Map();
          const pump = () => {
            while (inFlight < WINDOW && Date.now() < end) {
              inFlight++;
              const channel = channels[(id + j) % channels.length];
              sentOn.set(++id, channel);
              pub.send(`{"type":"publish","channel":"${channel}","data":${data},"id":${id}}`);
            }
            if (Date.now() >= end && inFlight === 0) done();
          };
          pub.on("message", (raw) => {
            const s = raw.toString();
            if (s.includes('"ack"')) {
              const ack = JSON.parse(s);
              inFlight--;
              published++;
              expected += subscribersOf.get(sentOn.get(ack.id)) ?? 0;
              sentOn.delete(ack.id);
              pump();
            }
          });
          pump();
        }),
    ),
  );
  // Let deliveries in flight arrive.
  const drainEnd = Date.now() + 3000;
  while (delivered < expected && Date.now() < drainEnd) await new Promise((r) => setTimeout(r, 20));
  const secs = (Date.now() - t0) / 1000;
  const after = redisPort ? await commandCount(redisPort) : null;
  // Each shard's Redis CPU over the run, and the publish rate at which the
  // busiest one would use a whole core (publishes per CPU-second of the
  // busiest shard): the fleet's Redis ceiling, which the brokers sharing
  // this machine's cores cannot reach themselves.
  const cpuUsed = redisPort ? (await redisCpu(redisPort)).map((c, i) => c - cpuBefore[i]) : null;
  const shardCores = cpuUsed ? cpuUsed.map((c) => Math.round((c / secs) * 1000) / 1000) : null;
  const busiest = cpuUsed ? Math.max(...cpuUsed) : 0;
  const cmds = after ? after.total - before.total : 0;
  const result = {
    setup: label,
    subscribers: subs,
    channels: channels.length,
    publishers,
    payloadBytes: PAYLOAD,
    published,
    publishedPerSec: Math.round(published / SECONDS),
    delivered,
    loss: expected ? 1 - delivered / expected : 0,
    deliveredPerSec: Math.round(delivered / secs),
    redisCommandsPer1000: redisPort ? Math.round((cmds / published) * 1000) : null,
    redisCpuCoresPerShard: shardCores,
    redisCeilingPublishesPerSec: busiest > 0 ? Math.round(published / busiest) : null,
    redisCommands: after
      ? Object.fromEntries(Object.entries(after.by).map(([k, v]) => [k, v - (before.by[k] ?? 0)]).filter(([, v]) => v > 0))
      : null,
  };
  sockets.forEach((ws) => ws.terminate());
  return result;
}

/// Kills what a set-up started (nodes, Redis servers) before the next.
function stop(...cs) {
  for (const c of cs) c.kill("SIGKILL");
}

const dir = mkdtempSync(join(tmpdir(), "tidegate-measure-"));
const results = [];
const fleetChannels = Array.from({ length: CHANNELS }, (_, i) => `bench:c${i}`);
const fleet = { channels: fleetChannels, subs: 2 * CHANNELS, publishers: PUBLISHERS };
if (wanted("memory-1")) {
  const file = config(dir, "memory", "m1");
  const n = await startNode(file);
  results.push(await run("memory-1", [n], file));
  stop(n.child);
}
if (wanted("fleet-memory")) {
  const file = config(dir, "fmemory", "fm1");
  const n = await startNode(file);
  results.push(await run("fleet-memory", [n], file, null, fleet));
  stop(n.child);
}
if (wanted("redis-1") || wanted("redis-2")) {
  const port = await freePort();
  const redis = await startRedis(port);
  if (wanted("redis-1")) {
    const f1 = config(dir, "r1", "r1", port);
    const n = await startNode(f1);
    await redisCmd(port, "CONFIG", "RESETSTAT");
    results.push(await run("redis-1", [n], f1, port));
    stop(n.child);
  }
  if (wanted("redis-2")) {
    const fa = config(dir, "ra", "ra", port);
    const fb = config(dir, "rb", "rb", port);
    const a = await startNode(fa);
    const b = await startNode(fb);
    results.push(await run("redis-2", [a, b], fa, port));
    stop(a.child, b.child);
  }
  stop(redis);
}
/// A fresh Redis Cluster of `masters`, then `count` nodes on it.
async function onCluster(label, masters, count, opts) {
  const before = children.length;
  const ports = await startRedisCluster(dir, masters);
  const files = Array.from({ length: count }, (_, i) => config(dir, `${label}-${i}`, `${label}-${i}`, ports[0], "redis-cluster"));
  const nodes = [];
  for (const f of files) nodes.push(await startNode(f));
  for (const p of ports) await redisCmd(p, "CONFIG", "RESETSTAT");
  results.push(await run(label, nodes, files[0], ports, opts));
  stop(...children.slice(before));
}
if (wanted("rcluster-1")) await onCluster("rcluster-1", 3, 1);
if (wanted("shard1-1")) await onCluster("shard1-1", 1, 1);
for (const masters of [1, 2, 3]) {
  if (wanted(`shards-${masters}`)) await onCluster(`shards-${masters}`, masters, 2, fleet);
}
console.log(JSON.stringify({ machine: `${process.platform} ${process.arch}, ${(await import("node:os")).cpus().length} cores`, results }, null, 2));
cleanup();
process.exit(0);
