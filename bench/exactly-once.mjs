// Exactly once through cuts (PROTOCOL.md §17, issue 41), on loopback:
//
// The TypeScript SDK publishes `--messages` keyed messages (default 10,000;
// at most `--window` unsettled at once, default 1,000) to one channel
// through a TCP proxy that destroys every connection it carries every
// `--cut-ms` (default 200 ms). The broker (TIDEGATE_BIN, default
// target/release/tidegate; bench/attacks/harness.mjs starts it) runs in
// cluster mode on a redis-server started on a free port. A subscriber connected straight to the broker counts what
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
import { createServer, connect } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { startRedis, startRedisBroker, stop, token, WebSocket } from "./attacks/harness.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const { TidegateClient } = await import(pathToFileURL(join(ROOT, "client-sdk-ts", "dist", "index.js")).href);

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const MESSAGES = flag("messages", 10_000);
const WINDOW = flag("window", 1000);
const CUT_MS = flag("cut-ms", 200);
const CHANNEL = "doc:exactly-once";

/** The broker on `redisPort` (cluster mode), with limits that pacing and handshakes do not reach. */
async function startBroker(redisPort) {
  const raise = (c) =>
    c
      .replace(/^node_accepts_per_sec = \d+$/m, "node_accepts_per_sec = 100000")
      .replace(/^ip_handshakes_per_sec = \d+$/m, "ip_handshakes_per_sec = 100000")
      .replace(/^ip_handshake_burst = \d+$/m, "ip_handshake_burst = 100000")
      .replace(/^ip_max_open = \d+$/m, "ip_max_open = 100000")
      .replace(/^messages_per_sec = 20$/m, "messages_per_sec = 100000")
      .replace(/^burst = 20$/m, "burst = 100000")
      .replace(/^handshake_burst = 10$/m, "handshake_burst = 100000")
      .replace(/^handshake_refill_per_sec = 0.5$/m, "handshake_refill_per_sec = 100000")
      .replace(/^drain_ms = \d+$/m, "drain_ms = 300");
  const broker = await startRedisBroker(redisPort, raise);
  for (;;) {
    const text = await fetch(`${broker.http}/metrics`).then((r) => r.text(), () => "");
    if (/^tidegate_cluster_bridge_up 1$/m.test(text)) return broker;
    await new Promise((r) => setTimeout(r, 20));
  }
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

const { redis, redisPort } = await startRedis();
const jwt = token("acme", undefined, ["doc:*"]);
let broker;
let proxy;
const clients = [];
try {
  broker = await startBroker(redisPort);
  proxy = await startProxy(broker.port);
  const seen = new Map();
  let ended = false;
  const subscriber = new TidegateClient({ url: broker.ws, token: jwt, WebSocket });
  clients.push(subscriber);
  await subscriber.connect();
  await subscriber.subscribe(CHANNEL, (data) => {
    if (data.end) ended = true;
    else seen.set(data.i, (seen.get(data.i) ?? 0) + 1);
  });
  const publisher = new TidegateClient({
    url: `ws://127.0.0.1:${proxy.port}/v1/ws`,
    token: jwt,
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
      broker: process.env.TIDEGATE_BIN ?? "target/release/tidegate",
    }),
  );
} finally {
  for (const c of clients) c.close();
  await proxy?.stop();
  if (broker) stop(broker);
  redis.kill("SIGTERM");
}
