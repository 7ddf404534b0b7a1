// Exactly once through cuts (PROTOCOL.md §17, issue 41), on loopback:
//
// The TypeScript SDK publishes `--messages` keyed messages (default 10,000;
// at most `--window` unsettled at once, default 1,000) to one channel
// through a TCP proxy that destroys every connection it carries every
// `--cut-ms` (default 200 ms). The broker (TIDEGATE_BIN, default
// target/debug/tidegate) runs in cluster mode on a redis-server started on
// a free port. A subscriber connected straight to the broker counts what
// it receives. After the last publish settles, an end marker is published
// and awaited, so nothing published before it is still on its way.
//
//   node bench/exactly-once.mjs [--messages 10000] [--window 1000] [--cut-ms 200]
//
// Reports (one JSON line): distinct messages delivered, duplicates seen by
// the subscriber, publish() resolved / rejected, resolved with
// duplicate: true, sent more than once, cuts, the broker's
// tidegate_publish_duplicates_total{api="ws"}, and the time from the first
// publish to the end marker. Needs `npm run build` in client-sdk-ts (it
// loads dist/index.js). Not a timed test: numbers go to bench/README.md.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createRequire } from "node:module";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const SDK = join(ROOT, "client-sdk-ts");
const require = createRequire(join(SDK, "package.json"));
const WebSocket = require("ws");
const { TidegateClient } = await import(pathToFileURL(join(SDK, "dist", "index.js")).href);

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const MESSAGES = flag("messages", 10_000);
const WINDOW = flag("window", 1000);
const CUT_MS = flag("cut-ms", 200);
const BIN = process.env.TIDEGATE_BIN ?? join(ROOT, "target", "debug", "tidegate");
const CHANNEL = "doc:exactly-once";

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

/** The repo's config.toml with `key = value` set inside `[section]` (added when missing). */
function config(overrides) {
  let lines = readFileSync(join(ROOT, "config.toml"), "utf8").split("\n");
  for (const [section, values] of Object.entries(overrides)) {
    let header = lines.findIndex((l) => l.trim() === `[${section}]`);
    if (header < 0) {
      lines.push("", `[${section}]`);
      header = lines.length - 1;
    }
    for (const [k, v] of Object.entries(values)) {
      let end = lines.findIndex((l, i) => i > header && /^\s*\[/.test(l));
      if (end < 0) end = lines.length;
      const text = `${k} = ${typeof v === "string" ? JSON.stringify(v) : v}`;
      const at = lines.findIndex((l, i) => i > header && i < end && new RegExp(`^${k}\\s*=`).test(l));
      if (at >= 0) lines[at] = text;
      else lines.splice(header + 1, 0, text);
    }
  }
  return lines.join("\n");
}

async function startRedis(dir) {
  const port = await freePort();
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir],
    { stdio: "ignore" },
  );
  for (let i = 0; i < 200; i++) {
    try {
      execFileSync("redis-cli", ["-p", String(port), "ping"], { stdio: "pipe" });
      return { port, child };
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error("redis-server did not start");
}

async function startBroker(dir, redisPort) {
  const path = join(dir, "config.toml");
  writeFileSync(
    path,
    config({
      handshake: { ip_handshakes_per_sec: 100000, ip_handshake_burst: 100000, ip_max_open: 100000 },
      cluster: {
        mode: "redis",
        redis_url: `redis://127.0.0.1:${redisPort}/`,
        secret: "bench-cluster-secret-0123456789",
        drain_ms: 300,
      },
      "plans.free": {
        messages_per_sec: 100000,
        burst: 100000,
        account_messages_per_sec: 100000,
        account_burst: 100000,
        handshake_burst: 100000,
        handshake_refill_per_sec: 100000,
      },
    }),
  );
  const child = spawn(BIN, ["serve", "--config", path, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  const http = await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      const m = d.toString().match(/tidegate listening on (\S+)/);
      if (m) resolve(m[1].replace(/\/$/, ""));
    });
    child.on("exit", (code) => reject(new Error(`broker exited ${code}`)));
  });
  for (;;) {
    const text = await (await fetch(`${http}/metrics`)).text();
    if (/^tidegate_cluster_bridge_up 1$/m.test(text)) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const token = execFileSync(BIN, ["token", "--account", "acme", "--config", path, "--sub", "doc:*", "--pub", "doc:*"])
    .toString()
    .trim();
  return { child, http, port: Number(new URL(http).port), token };
}

/** A TCP proxy to `target` whose `cut()` destroys every connection it carries. */
async function startProxy(target) {
  const sockets = new Set();
  const server = createServer((client) => {
    const upstream = connect(target, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => undefined);
    }
    client.pipe(upstream).pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: server.address().port,
    cut() {
      const n = sockets.size;
      for (const s of sockets) s.destroy();
      return n > 0;
    },
    stop: () => new Promise((r) => server.close(r)),
  };
}

async function duplicatesCounted(http) {
  const text = await (await fetch(`${http}/metrics`)).text();
  const m = /^tidegate_publish_duplicates_total\{api="ws"\} (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

const dir = mkdtempSync(join(tmpdir(), "tidegate-exactly-once-"));
const redis = await startRedis(dir);
let broker;
let proxy;
const clients = [];
try {
  broker = await startBroker(dir, redis.port);
  proxy = await startProxy(broker.port);
  const seen = new Map();
  let ended = false;
  const subscriber = new TidegateClient({ url: `ws://127.0.0.1:${broker.port}/v1/ws`, token: broker.token, WebSocket });
  clients.push(subscriber);
  await subscriber.connect();
  await subscriber.subscribe(CHANNEL, (data) => {
    if (data.end) ended = true;
    else seen.set(data.i, (seen.get(data.i) ?? 0) + 1);
  });
  const publisher = new TidegateClient({
    url: `ws://127.0.0.1:${proxy.port}/v1/ws`,
    token: broker.token,
    WebSocket,
    transport: "websocket",
    maxQueue: WINDOW,
    minReconnectDelayMs: 10,
    maxReconnectDelayMs: 100,
  });
  clients.push(publisher);
  await publisher.connect();
  const dupBefore = await duplicatesCounted(broker.http);

  let cuts = 0;
  const cutter = setInterval(() => {
    if (proxy.cut()) cuts += 1;
  }, CUT_MS);
  const started = performance.now();
  const outcome = { resolved: 0, rejected: 0, duplicateAnswers: 0, resent: 0, errors: {} };
  let next = 0;
  // At most WINDOW unsettled publishes: each settled one makes room for the next.
  await new Promise((done) => {
    let settled = 0;
    const launch = () => {
      const i = next++;
      publisher.publish(CHANNEL, { i }).then(
        (r) => {
          outcome.resolved += 1;
          if (r.duplicate) outcome.duplicateAnswers += 1;
          if (r.attempts > 1) outcome.resent += 1;
        },
        (e) => {
          outcome.rejected += 1;
          outcome.errors[e.code] = (outcome.errors[e.code] ?? 0) + 1;
        },
      ).finally(() => {
        settled += 1;
        if (next < MESSAGES) launch();
        if (settled === MESSAGES) done();
      });
    };
    while (next < Math.min(WINDOW, MESSAGES)) launch();
  });
  const publishedMs = performance.now() - started;
  clearInterval(cutter);
  await publisher.publish(CHANNEL, { end: true });
  while (!ended) await new Promise((r) => setTimeout(r, 10));
  const totalMs = performance.now() - started;
  let duplicatesSeen = 0;
  for (const n of seen.values()) duplicatesSeen += n - 1;
  console.log(
    JSON.stringify({
      messages: MESSAGES,
      window: WINDOW,
      cutEveryMs: CUT_MS,
      cuts,
      distinctDelivered: seen.size,
      duplicatesSeen,
      resolved: outcome.resolved,
      rejected: outcome.rejected,
      rejectedBy: outcome.errors,
      resolvedAsDuplicate: outcome.duplicateAnswers,
      sentMoreThanOnce: outcome.resent,
      brokerDuplicates: (await duplicatesCounted(broker.http)) - dupBefore,
      publishMs: Math.round(publishedMs),
      totalMs: Math.round(totalMs),
      broker: BIN,
    }),
  );
} finally {
  for (const c of clients) c.close();
  await proxy?.stop();
  // The broker first (its drain, then exit), then Redis, then the files.
  const exited = (child) =>
    child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once("exit", r));
  if (broker) {
    broker.child.kill("SIGTERM");
    await exited(broker.child);
  }
  redis.child.kill("SIGTERM");
  await exited(redis.child);
  rmSync(dir, { recursive: true, force: true });
}
