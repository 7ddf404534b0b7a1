// The `redis-reads` attack of bench/bounds-attacks.mjs (issue 38, item 9):
// a node on its own redis-server holds a long history (2,000 messages of
// 3 KiB on one channel), and one client loops over the cheapest reads of
// it, about 100 a second (the default key budget's rate): GraphQL
// `Channel.seq`, GraphQL `history(last: 1)`, and a socket's join with
// `since` at the current `seq` (then its leave). What it measures is the
// work those reads make Redis do: its CPU (`INFO cpu`, system + user) per
// second of the loop and per unit charged, beside an idle period of the
// same node. Then, after a ban and a webhook endpoint's occupancy, a TTL
// census of every key in that Redis (presence keys, `pr:`, aside: another
// part of issue 38 gives them theirs).
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";

import { openSocket, sleep, startRedis, startRedisBroker, stop } from "./harness.mjs";

const KEY = "tidegate-sample-publish-key";
const ADMIN_KEY = "bounds-attacks-admin-key-0123456789";
const CHANNEL = "doc:long";
const MESSAGES = 2000;
const DATA_BYTES = 3 * 1024;
const LOOP_MS = 10000;
const IDLE_MS = 3000;
const RATE = 100;

const cli = (port, ...args) => execFileSync("redis-cli", ["-p", String(port), ...args]).toString();

/** Redis's CPU time so far (system + user), in ms. */
function redisCpuMs(port) {
  const info = cli(port, "INFO", "cpu");
  const field = (name) => Number(info.match(new RegExp(`^${name}:([\\d.]+)`, "m"))[1]);
  return (field("used_cpu_sys") + field("used_cpu_user")) * 1000;
}

/** Every key with its PTTL (one script, the bench's own Redis only). */
function census(port) {
  const lua = "local out = {} for _, k in ipairs(redis.call('KEYS', '*')) do " +
    "out[#out + 1] = k out[#out + 1] = redis.call('PTTL', k) end return out";
  const lines = cli(port, "EVAL", lua, "0").trim().split("\n");
  const keys = [];
  for (let i = 0; i + 1 < lines.length; i += 2) keys.push({ key: lines[i], pttl: Number(lines[i + 1]) });
  return keys;
}

/** The part of a key that says what it is (`tidegate:seq:doc:long` → `seq:`). */
const kind = (key) => {
  const rest = key.replace(/^tidegate:/, "");
  const m = rest.match(/^(admin:\{ops\}:\w+|wh:\{[^}]*\}:\w+|wh:nodes|wh:limit:|[a-z]+:?)/);
  return m ? m[1].replace(/\{[^}]*\}/, "{…}") : rest;
};

async function graphql(http, query) {
  const r = await fetch(`${http}/v1/graphql`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", accept: "application/graphql-response+json" },
    body: JSON.stringify({ query }),
  });
  const body = await r.json();
  if (r.status !== 200 || body.errors) throw new Error(`graphql ${r.status}: ${JSON.stringify(body)}`);
  return { data: body.data, units: body.extensions?.rateLimit?.cost ?? 1 };
}

/** A frame's answer on `ws` (the frame with `id`). */
function answer(ws, frame) {
  return new Promise((resolve) => {
    const on = (d) => {
      const v = JSON.parse(d.toString());
      if (v.id === frame.id) {
        ws.off("message", on);
        resolve(v);
      }
    };
    ws.on("message", on);
    ws.send(JSON.stringify(frame));
  });
}

export async function redisReads() {
  const { redis, redisPort } = await startRedis();
  const hook = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.end());
  });
  await new Promise((r) => hook.listen(0, "127.0.0.1", r));
  let b;
  try {
    await sleep(300);
    b = await startRedisBroker(redisPort, (c) =>
      c
        .replace("\nsize = 100\nttl_ms = 300000\n", "\nsize = 2000\nttl_ms = 300000\n")
        .replace("\nmessages_per_sec = 20\nburst = 20\n", "\nmessages_per_sec = 1000\nburst = 1000\n")
        .replace("# [admin]\n# key_env", "[admin]\nkey_env") +
        `\n[[webhooks]]\nid = "census"\nurl = "http://127.0.0.1:${hook.address().port}/hook"\n` +
        `secret = "bounds-attacks-webhook-secret-0123456789"\nevents = ["channel.occupied", "channel.vacated"]\n`,
      { TIDEGATE_ADMIN_KEY: ADMIN_KEY },
    );
    for (let i = 0; i < 100 && !/^tidegate_cluster_bridge_up 1$/m.test(await (await fetch(`${b.http}/metrics`)).text()); i++) await sleep(100);
    // The long history, published through the node.
    const data = "x".repeat(DATA_BYTES);
    let seq = 0;
    for (let i = 0; i < MESSAGES; i++) {
      const r = await fetch(`${b.http}/v1/publish`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ channel: CHANNEL, data }),
      });
      if (r.status !== 200) throw new Error(`publish ${i}: ${r.status} ${await r.text()}`);
      seq = (await r.json()).seq;
    }
    const ws = await openSocket(b.ws, "reader");
    await sleep(500);

    // Idle: what the node costs Redis by itself (leases, counts).
    let cpu0 = redisCpuMs(redisPort);
    await sleep(IDLE_MS);
    const idleCpuMs = redisCpuMs(redisPort) - cpu0;

    // The loop, paced at RATE reads a second.
    const ops = { graphqlSeq: 0, graphqlHistory: 0, sinceJoins: 0 };
    let units = 0;
    let id = 0;
    const started = Date.now();
    cpu0 = redisCpuMs(redisPort);
    for (let n = 0; Date.now() - started < LOOP_MS; n++) {
      const due = started + (n * 1000) / RATE;
      if (due > Date.now()) await sleep(due - Date.now());
      switch (n % 3) {
        case 0: {
          const { data: d, units: u } = await graphql(b.http, `{ channel(name: "${CHANNEL}") { seq } }`);
          if (d.channel.seq !== seq) throw new Error(`seq ${d.channel.seq}, expected ${seq}`);
          units += u;
          ops.graphqlSeq++;
          break;
        }
        case 1: {
          const { data: d, units: u } = await graphql(b.http, `{ channel(name: "${CHANNEL}") { history(last: 1) { seq } } }`);
          if (d.channel.history[0]?.seq !== seq) throw new Error(`history ${JSON.stringify(d)}`);
          units += u;
          ops.graphqlHistory++;
          break;
        }
        default: {
          const ack = await answer(ws, { type: "subscribe", id: ++id, channel: CHANNEL, since: seq });
          if (ack.recovered !== true) throw new Error(`join: ${JSON.stringify(ack)}`);
          await answer(ws, { type: "unsubscribe", id: ++id, channel: CHANNEL });
          units += 2;
          ops.sinceJoins++;
        }
      }
    }
    const seconds = (Date.now() - started) / 1000;
    const loopCpuMs = redisCpuMs(redisPort) - cpu0;
    const workMs = loopCpuMs - (idleCpuMs * seconds * 1000) / IDLE_MS;

    // The census: a ban and the endpoint's occupancy (the socket joined
    // above) add their keys; the socket leaves so occupancy ends.
    const ban = await fetch(`${b.http}/v1/admin/ban`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ account: "villain", ttlMs: 60000 }),
    });
    if (ban.status !== 200) throw new Error(`ban: ${ban.status} ${await ban.text()}`);
    ws.terminate();
    await sleep(1500);
    const keys = census(redisPort).filter(({ key }) => !key.startsWith("tidegate:pr:"));
    const kinds = {};
    for (const { key, pttl } of keys) {
      const k = kind(key);
      kinds[k] ??= { keys: 0, withoutTtl: 0 };
      kinds[k].keys++;
      if (pttl === -1) kinds[k].withoutTtl++;
    }
    return {
      history: { messages: MESSAGES, MiB: +((MESSAGES * DATA_BYTES) / (1 << 20)).toFixed(1) },
      seconds: +seconds.toFixed(1),
      ops,
      opsPerSec: +((ops.graphqlSeq + ops.graphqlHistory + ops.sinceJoins) / seconds).toFixed(1),
      units,
      redisIdleCpuPct: +((idleCpuMs / IDLE_MS) * 100).toFixed(1),
      redisLoopCpuPct: +((loopCpuMs / (seconds * 1000)) * 100).toFixed(1),
      redisCpuUsPerUnit: +((Math.max(0, workMs) * 1000) / units).toFixed(1),
      census: { keys: keys.length, withoutTtl: keys.filter((k) => k.pttl === -1).map((k) => k.key), kinds },
    };
  } finally {
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
    hook.close();
  }
}
