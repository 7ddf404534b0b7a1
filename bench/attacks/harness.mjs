// The harness of bench/bounds-attacks.mjs: brokers and redis-servers of
// their own on free loopback ports (ended by PID), tokens, raw upgrades,
// sockets, and what /proc says of a process.

import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const require = createRequire(join(ROOT, "client-sdk-ts", "package.json"));
export const WebSocket = require("ws");

export const BIN = process.env.TIDEGATE_BIN ?? join(ROOT, "target", "release", "tidegate");
export const SAMPLE_SECRET = "tidegate-sample-secret-do-not-use-in-production";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

export const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
export function token(sub, secret = SAMPLE_SECRET, channels = ["*"]) {
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({
    sub,
    exp: Math.floor(Date.now() / 1000) + 3600,
    sub_channels: channels,
    pub_channels: channels,
  })}`;
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
}

/** Starts a broker on free ports with `patch` applied to config.toml's text. */
/** Keys `stderr` says the binary does not know (`- a.b.key: unknown key`):
 * the config of a newer tree given to an older binary (the "before" of a
 * comparison). */
const unknownKeys = (stderr) => [...stderr.matchAll(/- (?:[\w.-]+\.)?([\w-]+): unknown key/g)].map((m) => m[1]);

export async function startBroker(patch = (c) => c, { listenHost = "127.0.0.1", env = {} } = {}) {
  let config = patch(readFileSync(join(ROOT, "config.toml"), "utf8"));
  try {
    return await launch(config, listenHost, env);
  } catch (e) {
    // An older binary: once more without the keys it refused.
    const keys = unknownKeys(String(e?.message));
    if (keys.length === 0) throw e;
    for (const k of keys) config = config.replace(new RegExp(`^${k} = .*\n`, "gm"), "");
    return launch(config, listenHost, env);
  }
}

async function launch(config, listenHost, env) {
  const port = await freePort();
  const grpcPort = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "tidegate-bounds-"));
  writeFileSync(join(dir, "config.toml"), config);
  const listen = listenHost.includes(":") ? `[${listenHost}]:${port}` : `${listenHost}:${port}`;
  const child = spawn(BIN, ["serve", "--config", join(dir, "config.toml"), "--listen", listen, "--grpc-listen", `127.0.0.1:${grpcPort}`], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: "warn", ...env },
  });
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      if (/tidegate listening on/.test(d.toString())) resolve();
    });
    child.on("exit", (code) => reject(new Error(`broker exited ${code}: ${stderr}`)));
  });
  return { child, port, grpcPort, http: `http://127.0.0.1:${port}`, ws: `ws://127.0.0.1:${port}/v1/ws` };
}

export function stop(b) {
  try {
    process.kill(b.child.pid, "SIGKILL");
  } catch {}
}

export const rssKiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]);
export const fds = (pid) => {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return -1;
  }
};

/** A raw WebSocket upgrade from `localAddress`; resolves with the status. */
export function upgrade(port, { localAddress = "127.0.0.1", sub = "acme", secret = SAMPLE_SECRET, extra = "", host = "127.0.0.1", keep = false } = {}) {
  return new Promise((resolve) => {
    const s = connect({ host, port, localAddress });
    let buf = "";
    let done = false;
    const finish = (status) => {
      if (done) return;
      done = true;
      if (!keep || status !== 101) s.destroy();
      resolve({ status, socket: s });
    };
    s.on("connect", () => {
      s.write(
        `GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n` +
          `Sec-WebSocket-Protocol: tidegate.v1, bearer.${token(sub, secret)}\r\n${extra}\r\n`,
      );
    });
    s.on("data", (d) => {
      buf += d.toString("latin1");
      const m = buf.match(/^HTTP\/1\.1 (\d{3})/);
      if (m) finish(Number(m[1]));
    });
    s.on("error", () => finish(0));
    s.on("close", () => finish(0));
    s.setTimeout(10000, () => finish(-1));
  });
}

export const statusCounts = (list) => list.reduce((m, s) => ((m[s] = (m[s] ?? 0) + 1), m), {});

export async function openSocket(url, sub) {
  const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token(sub)}`]);
  await new Promise((resolve, reject) => {
    ws.once("message", (d) => (JSON.parse(d.toString()).type === "welcome" ? resolve() : reject(new Error(d.toString()))));
    ws.once("error", reject);
  });
  return ws;
}

/** Resolves when the TCP connection ends (or after `capMs`); with when. */
export function closedWithin(socket, started, capMs) {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), capMs);
    const end = () => {
      clearTimeout(t);
      resolve(Date.now() - started);
    };
    if (socket.destroyed || socket.readyState === "closed") return end();
    socket.once("close", end);
  });
}

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : null;
};

export const startRedis = async () => {
  const redisPort = await freePort();
  const redis = spawn("redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" });
  return { redis, redisPort };
};

/** A broker bridged to the redis-server on `redisPort`, with the account budget raised for the publishes (and `env` added to its environment). */
export const startRedisBroker = (redisPort, patch = (c) => c, env = {}) =>
  startBroker(
    (c) =>
      patch(c)
        .replace('mode = "memory"', 'mode = "redis"')
        .replace('redis_url = "redis://127.0.0.1:6379/"', `redis_url = "redis://127.0.0.1:${redisPort}/"`)
        .replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n")
        .replace("account_burst = 200\n", "account_burst = 100000\n"),
    { env: { TIDEGATE_CLUSTER_SECRET: "bounds-attacks-cluster-secret-0123456789", ...env } },
  );


/** Publishes `n` messages of `data` to `channel`; the position just before
 * the first (`since: 0` would lie below the clock-derived first `seq` and
 * recover nothing). */
export async function publishHistory(http, channel, n, data) {
  let since = 0;
  for (let i = 0; i < n; i++) {
    const r = await fetch(`${http}/v1/publish`, {
      method: "POST",
      headers: { authorization: "Bearer tidegate-sample-publish-key", "content-type": "application/json" },
      body: JSON.stringify({ channel, data }),
    });
    if (r.status !== 200) throw new Error(`publish ${i}: ${r.status} ${await r.text()}`);
    const { seq } = await r.json();
    if (i === 0) since = seq - 1;
  }
  return since;
}
