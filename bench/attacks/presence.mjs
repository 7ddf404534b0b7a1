// The `presence` attack of bench/bounds-attacks.mjs (issue 38, items 7
// and 8 and the presence reads): what a client can make presence hold or
// cost, from outside, against a broker binary.
//
//   ghosts      40 sockets subscribe to a presence channel, `refresh` to a
//               token of the same `sub` that no longer grants it, then
//               close: the members left behind, on one node and in Redis
//               mode 3 s (three leases) later
//   keys        one account joins 200 distinct presence channels once each
//               (Redis mode, lease 1 s), then closes: the presence keys in
//               Redis and how many have no TTL, while joined and 3 s after
//   reads       200 members with 1 KB infos in one channel (Redis mode): the
//               bytes Redis sends per 1-unit read, for 50 `presence` reads
//               of limit 1 and 50 `presence_stats`, from INFO's
//               total_net_output_bytes
//
// Loopback only; every broker and redis-server it starts is ended by PID.
import { execFileSync } from "node:child_process";
import { createHmac } from "node:crypto";

import { SAMPLE_SECRET, WebSocket, b64, sleep, startBroker, startRedis, stop } from "./harness.mjs";

const CLUSTER_SECRET = "bounds-attacks-cluster-secret-0123456789";

function presenceToken(sub, channels, info) {
  const claims = { sub, exp: Math.floor(Date.now() / 1000) + 3600, sub_channels: channels, pub_channels: [] };
  if (info) claims.info = info;
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  return `${body}.${createHmac("sha256", SAMPLE_SECRET).update(body).digest("base64url")}`;
}

/** Lets one address open many sockets quickly, and a connection send bursts. */
const roomy = (c) =>
  c
    .replace("ip_handshakes_per_sec = 5\n", "ip_handshakes_per_sec = 10000\n")
    .replace("ip_handshake_burst = 20\n", "ip_handshake_burst = 10000\n")
    .replace("ip_max_open = 50\n", "ip_max_open = 10000\n")
    .replace("messages_per_sec = 20\nburst = 20\n", "messages_per_sec = 1000\nburst = 1000\n")
    .replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n")
    .replace("account_burst = 200\n", "account_burst = 100000\n")
    .replace("max_subscriptions = 100\n", "max_subscriptions = 300\n");

const redisMode = (port) => (c) =>
  roomy(c)
    .replace('mode = "memory"', 'mode = "redis"')
    .replace('redis_url = "redis://127.0.0.1:6379/"', `redis_url = "redis://127.0.0.1:${port}/"`)
    .replace("lease_ms = 10000", "lease_ms = 1000");

/** A socket with its welcome read; `call(frame)` answers the frame's id. */
async function client(url, tok) {
  const ws = new WebSocket(url, ["tidegate.v1", `bearer.${tok}`]);
  const waiting = new Map();
  let nextId = 1;
  const welcome = await new Promise((resolve, reject) => {
    ws.once("message", (d) => resolve(JSON.parse(d.toString())));
    ws.once("error", reject);
  });
  ws.on("message", (d) => {
    const v = JSON.parse(d.toString());
    if (v.id !== undefined && waiting.has(v.id)) {
      waiting.get(v.id)(v);
      waiting.delete(v.id);
    }
  });
  const call = (frame) =>
    new Promise((resolve) => {
      const id = nextId++;
      waiting.set(id, resolve);
      ws.send(JSON.stringify({ ...frame, id }));
    });
  const closed = () =>
    new Promise((resolve) => {
      if (ws.readyState === WebSocket.CLOSED) return resolve();
      ws.once("close", resolve);
      ws.close();
    });
  return { ws, welcome, call, closed };
}

const redisCli = (port, ...args) => execFileSync("redis-cli", ["-p", String(port), ...args]).toString();

/** Presence keys in Redis and how many have no TTL. */
function census(port) {
  const lua =
    "local n, forever = 0, 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do " +
    "n = n + 1 if redis.call('PTTL', k) == -1 then forever = forever + 1 end end return {n, forever}";
  const [keys, withoutTtl] = redisCli(port, "EVAL", lua, "0", "tidegate:pr:*").trim().split("\n").map(Number);
  return { keys, withoutTtl };
}

const outputBytes = (port) => Number(redisCli(port, "INFO", "stats").match(/total_net_output_bytes:(\d+)/)[1]);

/** The members a fresh socket reads in `channel`. */
async function connections(b, channel) {
  const c = await client(b.ws, presenceToken("reader", ["note:*"]));
  const r = await c.call({ type: "presence_stats", channel });
  await c.closed();
  return r.connections;
}

async function ghostsOn(b) {
  const n = 40;
  const sockets = [];
  for (let i = 0; i < n; i++) {
    const c = await client(b.ws, presenceToken(`ghost${i}`, ["note:*"]));
    const ack = await c.call({ type: "subscribe", channel: "note:ghosts" });
    if (ack.type !== "ack") throw new Error(JSON.stringify(ack));
    sockets.push(c);
  }
  const joined = await connections(b, "note:ghosts");
  for (const [i, c] of sockets.entries()) {
    await c.call({ type: "refresh", token: presenceToken(`ghost${i}`, ["doc:*"]) });
    await c.closed();
  }
  await sleep(3000);
  return { joined, membersAfterClose: await connections(b, "note:ghosts") };
}

async function ghosts() {
  const single = await startBroker(roomy);
  let memory;
  try {
    memory = await ghostsOn(single);
  } finally {
    stop(single);
  }
  const { redis, redisPort } = await startRedis();
  let b;
  try {
    await sleep(300);
    b = await startBroker(redisMode(redisPort), { env: { TIDEGATE_CLUSTER_SECRET: CLUSTER_SECRET } });
    await sleep(500);
    return { oneNode: memory, redisMode: await ghostsOn(b) };
  } finally {
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
  }
}

async function keys() {
  const { redis, redisPort } = await startRedis();
  let b;
  try {
    await sleep(300);
    b = await startBroker(redisMode(redisPort), { env: { TIDEGATE_CLUSTER_SECRET: CLUSTER_SECRET } });
    await sleep(500);
    const c = await client(b.ws, presenceToken("many", ["note:*"]));
    for (let i = 0; i < 200; i++) {
      const ack = await c.call({ type: "subscribe", channel: `note:k${i}` });
      if (ack.type !== "ack") throw new Error(JSON.stringify(ack));
    }
    const joined = census(redisPort);
    await c.closed();
    await sleep(3000);
    return { channels: 200, joined, threeLeasesAfterClose: census(redisPort) };
  } finally {
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
  }
}

async function reads() {
  const { redis, redisPort } = await startRedis();
  let b;
  const members = [];
  try {
    await sleep(300);
    b = await startBroker(redisMode(redisPort), { env: { TIDEGATE_CLUSTER_SECRET: CLUSTER_SECRET } });
    await sleep(500);
    const info = { pad: "x".repeat(1000) };
    for (let i = 0; i < 200; i++) {
      const c = await client(b.ws, presenceToken(`m${String(i).padStart(3, "0")}`, ["note:*"], info));
      const ack = await c.call({ type: "subscribe", channel: "note:big" });
      if (ack.type !== "ack") throw new Error(JSON.stringify(ack));
      members.push(c);
    }
    const reader = members[0];
    const per = async (frame) => {
      const before = outputBytes(redisPort);
      for (let i = 0; i < 50; i++) await reader.call(frame);
      return Math.round((outputBytes(redisPort) - before) / 50);
    };
    const first = await reader.call({ type: "presence", channel: "note:big", limit: 1 });
    return {
      members: 200,
      infoBytesEach: JSON.stringify(info).length,
      answered: { members: first.members.length, connections: first.connections },
      redisBytesPerPresenceLimit1: await per({ type: "presence", channel: "note:big", limit: 1 }),
      redisBytesPerPresenceStats: await per({ type: "presence_stats", channel: "note:big" }),
    };
  } finally {
    for (const c of members) c.ws.terminate();
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
  }
}

export async function presence() {
  return { ghosts: await ghosts(), keys: await keys(), reads: await reads() };
}
