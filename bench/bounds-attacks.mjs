// Issue 26's attacks, replayed from outside against a broker binary (the
// black-box half of "How we will know"; the tests under broker/tests/it/
// are the other half). Each attack starts its own broker on free loopback
// ports with a config patched only where the attack needs it, runs for a
// bounded time, and reports what a client could make the broker hold:
//
//   budget-flood      4 sockets send `budget` frames and never read (15 s):
//                     broker RSS growth, how the sockets ended
//   recovery-backlog  20 sockets subscribe with `since` over a full history
//                     (100 x 60 KiB) and never read: RSS growth
//   keepalive-trickle 150 keep-alive connections: one quick GET, then a
//                     second request head one byte a second: how many are
//                     open after 30 s, when they were closed
//   upgrade-flood     one address floods upgrades (100 in flight, 5 s)
//                     while 40 other addresses connect once each: how many
//                     of the 40 got in, the flood's answers by status
//   forged-xff        behind a trusted proxy, 40 upgrades whose forged
//                     first X-Forwarded-For line differs each time while
//                     the proxy's appended line names one client: how many
//                     got past the per-IP burst (20)
//   grpc-silent       200 TCP connections to the gRPC port that send
//                     nothing: how many are open after 30 s
//   mapped-ban        a dual-stack listener, a ban of 127.0.0.6: does the
//                     same client, seen as ::ffff:127.0.0.6, get in
//   recovery-backlog-redis  the same in Redis mode (a node on its own
//                     redis-server): 10 sockets subscribe with `since` to
//                     5 channels of 100 x 60 KiB each and never read: RSS
//                     growth (each join used to copy the whole lists)
//   close-unread      3 rounds of 40 sockets that subscribe, stop reading
//                     while 40 messages of 60 KiB fan out to them, then
//                     half send a close frame and half wait for the
//                     broker's 4008; none ever reads again: the broker's
//                     descriptors and RSS once every socket has ended
//   redis-history     a node on its own redis-server (16 MiB
//                     history.cluster_max_bytes): 2,000 publishes of
//                     60 KiB over 500 channels; the history bytes Redis
//                     holds, read back from Redis
//   slow-body         (issue 38, bench/attacks/door.mjs) 300 admin bans
//                     without a key and 300 keyed publishes from two
//                     addresses, each declaring 262,000 bytes and sending
//                     7: descriptors and RSS held 2 s and 13 s in, and
//                     whether 20 other clients got answers
//   tls-silent        (issue 38) 1,200 silent TCP connections from one
//                     address to a TLS listener: how many of 20 HTTPS
//                     clients from other addresses were answered, how fast
//   sse-query         (issue 38) 8 loops for 5 s of `/v1/sse` with a 63 KB
//                     query and no token from one address: broker CPU per
//                     request and the answers by status
//   redis-reads       a node on its own redis-server with 2,000 x 3 KiB
//                     of history on one channel; one client loops over
//                     1-unit reads of it (GraphQL seq, history(last: 1),
//                     a join with since at the current seq) at about
//                     100/s for 10 s: Redis CPU (INFO cpu) per second and
//                     per unit; then a TTL census of every key (issue 38)
//   graphql-*         issue 38's GraphQL classes (bench/attacks/graphql.mjs):
//                     fragments spreading the next twice at 8-22 levels on
//                     one worker (status, CPU per document, /healthz while
//                     two run); @skip with a default not sent (bytes read,
//                     publishes made, units); publishBatch given one object
//                     under 400 and 50 aliases (publishes/s, balance);
//                     3,200 and 250 aliases of prices, 250 of budget (units,
//                     bytes and CPU per request, /healthz); introspection
//                     past the depth limit; history of 16 KiB messages
//                     (units per MiB against a socket recovery's); a
//                     subscription selecting data under 20 aliases (bytes
//                     one 60 KiB publish delivers); parse and validation
//                     errors and channels(first: 0 / 1) over 20,000
//                     channels (units, CPU per request)
//   presence          (attacks/presence.mjs, issue 38) 40 sockets subscribe
//                     to a presence channel, refresh to a token without it
//                     and close: members left (one node, Redis mode); one
//                     account joins 200 presence channels once each: keys
//                     in Redis without a TTL, joined and 3 s after; a
//                     channel of 200 members with 1 KB infos: Redis bytes
//                     out per 1-unit `presence` (limit 1) and
//                     `presence_stats` read
//
//   TIDEGATE_BIN=target/release/tidegate node bench/bounds-attacks.mjs \
//     [--only NAME[,NAME]] [--out FILE]
//
// Loopback only (127.0.0.0/8, several source addresses); every process it
// starts is ended by its PID. Not a timed test: the numbers go to
// bench/README.md ("Bounds from outside") by hand.
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { connect } from "node:net";

import {
  BIN,
  WebSocket,
  closedWithin,
  fds,
  median,
  openSocket,
  publishHistory,
  rssKiB,
  sleep,
  startBroker,
  startRedis,
  startRedisBroker,
  statusCounts,
  stop,
  token,
  upgrade,
} from "./attacks/harness.mjs";
import { closeUnread } from "./attacks/close-unread.mjs";
import { slowBody, sseQuery, tlsSilent } from "./attacks/door.mjs";
import { redisReads } from "./attacks/redis.mjs";
import { graphqlAttacks } from "./attacks/graphql.mjs";
import { presence } from "./attacks/presence.mjs";

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const ONLY = opt("only")?.split(",");
const OUT = opt("out");
const OWN_SECRET = "bounds-attacks-secret-0123456789abcdef";
const OWN_KEY = "bounds-attacks-publish-key-0123456789";
const ADMIN_KEY = "bounds-attacks-admin-key-0123456789";

// ---- the attacks ----------------------------------------------------------

async function budgetFlood() {
  const b = await startBroker();
  try {
    const sockets = await Promise.all([0, 1, 2, 3].map((i) => openSocket(b.ws, `flood${i}`)));
    await sleep(200); // the broker settles after the handshakes
    const before = rssKiB(b.child.pid);
    let peak = before;
    const ended = sockets.map((ws) => new Promise((r) => ws.once("close", (code) => r(code))));
    const codes = [];
    sockets.forEach((ws, i) => ended[i].then((c) => (codes[i] = c)));
    // Never read: the kernel's receive window fills and the broker's
    // answers stay with the broker unless something bounds them.
    for (const ws of sockets) ws._socket.pause();
    const frame = JSON.stringify({ type: "budget" });
    let sent = 0;
    const until = Date.now() + 15000;
    while (Date.now() < until) {
      for (const ws of sockets) {
        if (ws.readyState !== WebSocket.OPEN || ws._socket.writableLength > 1 << 20) continue;
        for (let k = 0; k < 200; k++) ws.send(frame);
        sent += 200;
      }
      peak = Math.max(peak, rssKiB(b.child.pid));
      await sleep(20);
    }
    const after = rssKiB(b.child.pid);
    for (const ws of sockets) ws.terminate();
    return {
      framesSent: sent,
      rssBeforeMiB: +(before / 1024).toFixed(1),
      rssPeakMiB: +(peak / 1024).toFixed(1),
      growthMiB: +((peak - before) / 1024).toFixed(1),
      socketsOpenAt15s: sockets.filter((_, i) => codes[i] === undefined).length,
      closeCodes: codes.filter((c) => c !== undefined),
    };
  } finally {
    stop(b);
  }
}

async function recoveryBacklog() {
  const b = await startBroker((c) =>
    c.replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n").replace("account_burst = 200\n", "account_burst = 100000\n"),
  );
  try {
    const data = "x".repeat(60 * 1024);
    const since = await publishHistory(b.http, "doc:backlog", 100, data);
    await sleep(200);
    const before = rssKiB(b.child.pid);
    let peak = before;
    const sockets = [];
    const codes = [];
    for (let i = 0; i < 20; i++) {
      const ws = await openSocket(b.ws, `backlog${i}`);
      ws._socket.pause();
      ws.once("close", (code) => (codes[i] = code));
      ws.send(JSON.stringify({ type: "subscribe", id: 1, channel: "doc:backlog", since }));
      sockets.push(ws);
    }
    const until = Date.now() + 10000;
    while (Date.now() < until) {
      peak = Math.max(peak, rssKiB(b.child.pid));
      await sleep(50);
    }
    for (const ws of sockets) ws.terminate();
    return {
      historyMiB: +((100 * data.length) / (1 << 20)).toFixed(1),
      rssBeforeMiB: +(before / 1024).toFixed(1),
      rssPeakMiB: +(peak / 1024).toFixed(1),
      growthMiB: +((peak - before) / 1024).toFixed(1),
      wholeCopiesWouldBeMiB: +((20 * 100 * data.length) / (1 << 20)).toFixed(1),
      since,
      closedWith4008: codes.filter((c) => c === 4008).length,
    };
  } finally {
    stop(b);
  }
}

/** A redis-server of its own on a free loopback port (the caller ends it by PID). */
async function recoveryBacklogRedis() {
  const { redis, redisPort } = await startRedis();
  let b;
  try {
    await sleep(300);
    b = await startRedisBroker(redisPort);
    // Publishes before the bridge is up would go to the node's own history.
    for (let i = 0; i < 100 && !/^tidegate_cluster_bridge_up 1$/m.test(await (await fetch(`${b.http}/metrics`)).text()); i++) await sleep(100);
    const data = "x".repeat(60 * 1024);
    const channels = 5;
    const since = [];
    for (let c = 0; c < channels; c++) {
      since.push(await publishHistory(b.http, `doc:rb${c}`, 100, data));
    }
    await sleep(200);
    const before = rssKiB(b.child.pid);
    let peak = before;
    const sockets = [];
    const codes = [];
    const n = 10;
    for (let i = 0; i < n; i++) {
      const ws = await openSocket(b.ws, `rbacklog${i}`);
      ws._socket.pause();
      ws.once("close", (code) => (codes[i] = code));
      for (let c = 0; c < channels; c++) {
        ws.send(JSON.stringify({ type: "subscribe", id: c, channel: `doc:rb${c}`, since: since[c] }));
      }
      sockets.push(ws);
    }
    const until = Date.now() + 10000;
    while (Date.now() < until) {
      peak = Math.max(peak, rssKiB(b.child.pid));
      await sleep(50);
    }
    for (const ws of sockets) ws.terminate();
    const metrics = await (await fetch(`${b.http}/metrics`)).text();
    const series = (name) => Number(metrics.match(new RegExp(`^${name.replace(/[{}"]/g, "\\$&")} (\\S+)$`, "m"))?.[1] ?? 0);
    return {
      joins: series('tidegate_redis_script_duration_seconds_count{script="join"}'),
      pages: series('tidegate_redis_script_duration_seconds_count{script="page"}'),
      closed4008: series('tidegate_rejections_total{layer="outbound",reason="slow_consumer_closed"}'),
      historyMiB: +((channels * 100 * data.length) / (1 << 20)).toFixed(1),
      rssBeforeMiB: +(before / 1024).toFixed(1),
      rssPeakMiB: +(peak / 1024).toFixed(1),
      growthMiB: +((peak - before) / 1024).toFixed(1),
      wholeCopiesWouldBeMiB: +((n * channels * 100 * data.length) / (1 << 20)).toFixed(1),
    };
  } finally {
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
  }
}

async function keepaliveTrickle() {
  const b = await startBroker();
  try {
    const started = Date.now();
    const fdBefore = fds(b.child.pid);
    const conns = await Promise.all(
      Array.from({ length: 150 }, () =>
        new Promise((resolve) => {
          const s = connect({ host: "127.0.0.1", port: b.port, localAddress: "127.0.0.3" });
          let got = "";
          s.on("error", () => {});
          s.on("connect", () => s.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
          s.on("data", (d) => {
            got += d.toString();
            if (got.includes("\r\n\r\n")) {
              s.removeAllListeners("data");
              resolve({ s, firstOk: got.startsWith("HTTP/1.1 200") });
            }
          });
          s.on("close", () => resolve({ s, firstOk: false }));
        }),
      ),
    );
    const head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + "a".repeat(100);
    const trickle = setInterval(() => {
      for (const { s } of conns) if (!s.destroyed) s.write(head[Math.floor((Date.now() - started) / 1000) % head.length]);
    }, 1000);
    const fdPeak = fds(b.child.pid);
    const times = await Promise.all(conns.map(({ s }) => closedWithin(s, started, 30000)));
    clearInterval(trickle);
    for (const { s } of conns) s.destroy();
    const closed = times.filter((t) => t !== null);
    return {
      connections: conns.length,
      firstRequestAnswered: conns.filter((c) => c.firstOk).length,
      openAfter30s: times.length - closed.length,
      closedMedianMs: median(closed),
      closedMaxMs: closed.length ? Math.max(...closed) : null,
      brokerFdsBefore: fdBefore,
      brokerFdsWithTrickle: fdPeak,
    };
  } finally {
    stop(b);
  }
}

async function upgradeFlood() {
  const b = await startBroker();
  try {
    const flood = [];
    let flooding = true;
    const workers = Array.from({ length: 100 }, async (_, w) => {
      let n = 0;
      while (flooding) {
        const { status } = await upgrade(b.port, { localAddress: "127.0.0.2", sub: `flood${w}-${n++}` });
        flood.push(status);
      }
    });
    await sleep(1000);
    const clean = await Promise.all(
      Array.from({ length: 40 }, (_, i) => upgrade(b.port, { localAddress: `127.0.0.${10 + i}`, sub: `clean${i}`, keep: true })),
    );
    await sleep(4000);
    flooding = false;
    await Promise.all(workers);
    for (const c of clean) c.socket.destroy();
    return {
      floodUpgrades: flood.length,
      floodByStatus: statusCounts(flood),
      cleanAdmitted: clean.filter((c) => c.status === 101).length,
      cleanByStatus: statusCounts(clean.map((c) => c.status)),
    };
  } finally {
    stop(b);
  }
}

async function forgedXff() {
  const b = await startBroker((c) => c.replace("trusted_proxies = []", 'trusted_proxies = ["127.0.0.1"]'), {
    env: { TIDEGATE_JWT_SECRET: OWN_SECRET, TIDEGATE_API_KEYS_0_KEY: OWN_KEY },
  });
  try {
    const results = [];
    for (let i = 0; i < 40; i++) {
      // The client's own (forged) line first, the proxy's appended line last.
      const extra = `X-Forwarded-For: 10.${i}.${i}.${i}\r\nX-Forwarded-For: 198.51.100.7\r\n`;
      const r = await upgrade(b.port, { sub: `xff${i}`, secret: OWN_SECRET, extra, keep: true });
      results.push(r);
    }
    for (const r of results) r.socket.destroy();
    return {
      upgrades: results.length,
      admitted: results.filter((r) => r.status === 101).length,
      byStatus: statusCounts(results.map((r) => r.status)),
      perIpBurst: 20,
    };
  } finally {
    stop(b);
  }
}

async function grpcSilent() {
  const b = await startBroker();
  try {
    const started = Date.now();
    const sockets = await Promise.all(
      Array.from({ length: 200 }, () =>
        new Promise((resolve) => {
          const s = connect({ host: "127.0.0.1", port: b.grpcPort, localAddress: "127.0.0.4" });
          s.on("error", () => {});
          s.on("connect", () => resolve(s));
          s.on("close", () => resolve(s));
        }),
      ),
    );
    const fdPeak = fds(b.child.pid);
    const times = await Promise.all(sockets.map((s) => closedWithin(s, started, 30000)));
    for (const s of sockets) s.destroy();
    const closed = times.filter((t) => t !== null);
    return {
      connections: sockets.length,
      openAfter30s: times.length - closed.length,
      closedWithin1s: closed.filter((t) => t < 1000).length,
      closedMedianMs: median(closed),
      closedMaxMs: closed.length ? Math.max(...closed) : null,
      brokerFdsWhileOpen: fdPeak,
    };
  } finally {
    stop(b);
  }
}

async function mappedBan() {
  const b = await startBroker((c) => c.replace("# [admin]\n# key_env", "[admin]\nkey_env"), {
    listenHost: "::",
    env: { TIDEGATE_JWT_SECRET: OWN_SECRET, TIDEGATE_API_KEYS_0_KEY: OWN_KEY, TIDEGATE_ADMIN_KEY: ADMIN_KEY },
  });
  try {
    const ban = await fetch(`${b.http}/v1/admin/ban`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ ip: "127.0.0.6", ttlMs: 60000 }),
    });
    if (ban.status !== 200) throw new Error(`ban: ${ban.status} ${await ban.text()}`);
    const banned = await upgrade(b.port, { localAddress: "127.0.0.6", sub: "mapped", secret: OWN_SECRET });
    const other = await upgrade(b.port, { localAddress: "127.0.0.7", sub: "other", secret: OWN_SECRET });
    return { listener: `[::]:${b.port}`, bannedClientStatus: banned.status, otherClientStatus: other.status };
  } finally {
    stop(b);
  }
}

/** The bytes of every `hist:` list in the Redis on `port` (redis-cli). */
function histBytes(port) {
  const lua = "local t = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do " +
    "for _, m in ipairs(redis.call('LRANGE', k, 0, -1)) do t = t + #m end end return t";
  const out = execFileSync("redis-cli", ["-p", String(port), "EVAL", lua, "0", "tidegate:hist:*"]);
  return Number(out.toString().trim());
}

async function redisHistory() {
  const { redis, redisPort } = await startRedis();
  let b;
  try {
    await sleep(300);
    b = await startRedisBroker(redisPort, (c) => c.replace("cluster_max_bytes = 268435456", "cluster_max_bytes = 16777216"));
    const data = "x".repeat(60 * 1024);
    for (let i = 0; i < 2000; i++) {
      const r = await fetch(`${b.http}/v1/publish`, {
        method: "POST",
        headers: { authorization: "Bearer tidegate-sample-publish-key", "content-type": "application/json" },
        body: JSON.stringify({ channel: `doc:r${i % 500}`, data }),
      });
      if (r.status !== 200) throw new Error(`publish ${i}: ${r.status} ${await r.text()}`);
    }
    await sleep(1000); // a node flushes its index every 100 ms
    return {
      publishedMiB: +((2000 * data.length) / (1 << 20)).toFixed(1),
      budgetMiB: 16,
      redisHistoryMiB: +(histBytes(redisPort) / (1 << 20)).toFixed(1),
    };
  } finally {
    if (b) stop(b);
    process.kill(redis.pid, "SIGKILL");
  }
}

const ATTACKS = {
  "budget-flood": budgetFlood,
  "recovery-backlog": recoveryBacklog,
  "recovery-backlog-redis": recoveryBacklogRedis,
  "keepalive-trickle": keepaliveTrickle,
  "upgrade-flood": upgradeFlood,
  "forged-xff": forgedXff,
  "grpc-silent": grpcSilent,
  "mapped-ban": mappedBan,
  "redis-history": redisHistory,
  "close-unread": closeUnread,
  "slow-body": slowBody,
  "tls-silent": tlsSilent,
  "sse-query": sseQuery,
  "redis-reads": redisReads,
  ...graphqlAttacks,
  presence,
};

const report = { binary: BIN, date: new Date().toISOString(), results: {} };
for (const [name, run] of Object.entries(ATTACKS)) {
  if (ONLY && !ONLY.includes(name)) continue;
  try {
    report.results[name] = await run();
  } catch (e) {
    report.results[name] = { error: String(e?.message ?? e) };
  }
  console.log(name, JSON.stringify(report.results[name]));
}
if (OUT) writeFileSync(OUT, JSON.stringify(report, null, 2) + "\n");
// Exit rather than wait for the event loop: an attack that failed midway
// (against an older binary, say) can leave a socket or timer behind.
process.exit(Object.values(report.results).some((r) => r.error) ? 1 : 0);
