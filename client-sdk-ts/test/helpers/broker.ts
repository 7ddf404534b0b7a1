/**
 * Runs the real broker (`tidegate serve`) as a child process on
 * 127.0.0.1:0 with a config written to a temp dir, and mints tokens with
 * `tidegate token`. Only the child started here is ever killed, by its PID.
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { after, before } from "node:test";
import { existsSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { ClientOptions } from "../../src/types.js";

// This file runs from build/test/helpers/ → client-sdk-ts is three levels up.
export const SDK_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
export const REPO_ROOT = resolve(SDK_ROOT, "..");
export const TIDEGATE_BIN = resolve(
  SDK_ROOT,
  process.env.TIDEGATE_BIN ?? "../target/release/tidegate",
);
export const PUBLISH_KEY = "tidegate-sample-publish-key";

/** Fails (never skips) when the broker has not been built. */
export function requireBroker(): string {
  if (!existsSync(TIDEGATE_BIN)) {
    throw new Error(
      `the tidegate broker binary is missing at ${TIDEGATE_BIN}: ` +
        "run `cargo build --release -p tidegate` at the repo root (or set TIDEGATE_BIN)",
    );
  }
  return TIDEGATE_BIN;
}

/**
 * The repo's config.toml with some keys changed: `{"plans.free": {burst: 5}}`
 * rewrites `burst = …` inside `[plans.free]` (or adds it there).
 */
export function brokerConfig(overrides: Record<string, Record<string, string | number | boolean>>): string {
  let lines = readFileSync(join(REPO_ROOT, "config.toml"), "utf8").split("\n");
  for (const [section, values] of Object.entries(overrides)) {
    const header = lines.findIndex((l) => l.trim() === `[${section}]`);
    if (header < 0) {
      lines.push("", `[${section}]`);
      for (const [k, v] of Object.entries(values)) lines.push(`${k} = ${toml(v)}`);
      continue;
    }
    let end = lines.findIndex((l, i) => i > header && /^\s*\[/.test(l));
    if (end < 0) end = lines.length;
    for (const [k, v] of Object.entries(values)) {
      const at = lines.findIndex((l, i) => i > header && i < end && new RegExp(`^${k}\\s*=`).test(l));
      if (at >= 0) lines[at] = `${k} = ${toml(v)}`;
      else {
        lines = [...lines.slice(0, header + 1), `${k} = ${toml(v)}`, ...lines.slice(header + 1)];
        end += 1;
      }
    }
  }
  return lines.join("\n");
}

function toml(v: string | number | boolean): string {
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

/** Limits that keep a test file's many handshakes from hitting the handshake buckets. */
export const TEST_BASE: Record<string, Record<string, string | number | boolean>> = {
  handshake: { ip_handshakes_per_sec: 200, ip_handshake_burst: 400, ip_max_open: 200 },
  cluster: { drain_ms: 500 },
  "plans.free": { handshake_burst: 200, handshake_refill_per_sec: 100 },
};

export function merge(
  ...parts: Array<Record<string, Record<string, string | number | boolean>>>
): Record<string, Record<string, string | number | boolean>> {
  const out: Record<string, Record<string, string | number | boolean>> = {};
  for (const p of parts) for (const [s, v] of Object.entries(p)) out[s] = { ...out[s], ...v };
  return out;
}

export interface Broker {
  httpUrl: string;
  wsUrl: string;
  port: number;
  configPath: string;
  /** `tidegate token …` with this broker's config. */
  token(args: {
    sub?: string | string[];
    pub?: string | string[];
    account?: string;
    plan?: string;
    ttl?: number;
    /** The `info` claim presence shows (§13). */
    info?: Record<string, unknown>;
  }): Promise<string>;
  /** POST /v1/publish with the sample API key. */
  publish(channel: string, data: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
  /** SIGTERM (a drain) without waiting; resolves with the exit code. */
  terminate(): Promise<number | null>;
  output(): string;
}

export async function startBroker(configToml: string): Promise<Broker> {
  const bin = requireBroker();
  const dir = mkdtempSync(join(tmpdir(), "tidegate-sdk-"));
  const configPath = join(dir, "config.toml");
  writeFileSync(configPath, configToml);
  const child: ChildProcess = spawn(bin, ["serve", "--config", configPath, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
  let log = "";
  child.stderr!.on("data", (d) => (log = (log + d.toString()).slice(-20_000)));
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));

  const httpUrl = await new Promise<string>((resolvePromise, reject) => {
    const guard = setTimeout(() => reject(new Error(`broker did not start in 15 s:\n${log}`)), 15_000);
    const rl = createInterface({ input: child.stdout! });
    rl.on("line", (line) => {
      log += `${line}\n`;
      const m = /tidegate listening on (http:\/\/\S+)/.exec(line);
      if (m) {
        clearTimeout(guard);
        resolvePromise(m[1]!.replace(/\/$/, ""));
      }
    });
    void exited.then((code) => {
      clearTimeout(guard);
      reject(new Error(`broker exited (${code}) before listening:\n${log}`));
    });
  });
  const port = Number(new URL(httpUrl).port);
  const wsUrl = `${httpUrl.replace(/^http/, "ws")}/v1/ws`;

  return {
    httpUrl,
    wsUrl,
    port,
    configPath,
    output: () => log,
    token: ({ sub = "doc:*", pub = "doc:*", account = "acme", plan, ttl, info }) =>
      new Promise((resolveToken, reject) => {
        const args = ["token", "--account", account, "--config", configPath];
        for (const s of [sub].flat()) args.push("--sub", s);
        for (const p of [pub].flat()) args.push("--pub", p);
        if (plan) args.push("--plan", plan);
        if (ttl !== undefined) args.push("--ttl", String(ttl));
        if (info !== undefined) args.push("--info", JSON.stringify(info));
        execFile(bin, args, (err, stdout, stderr) => {
          if (err) reject(new Error(`tidegate token failed: ${stderr || err.message}`));
          else resolveToken(stdout.trim());
        });
      }),
    publish: async (channel, data) => {
      const res = await fetch(`${httpUrl}/v1/publish`, {
        method: "POST",
        headers: { authorization: `Bearer ${PUBLISH_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ channel, data }),
      });
      const text = await res.text();
      let body: any = text;
      try {
        body = JSON.parse(text);
      } catch {
        // keep the text
      }
      return { status: res.status, body };
    },
    terminate: () => {
      child.kill("SIGTERM");
      const guard = setTimeout(() => child.kill("SIGKILL"), 15_000);
      return exited.finally(() => clearTimeout(guard));
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const guard = setTimeout(() => child.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(guard);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * SDK clients for one test file: made against `url()` with short reconnect
 * delays (tests should not wait out production backoff), all closed by
 * `closeAll()` in the file's `after` hook.
 */
export function sdkClients(url: () => string) {
  const made: TidegateClient[] = [];
  return {
    make(options: Partial<ClientOptions>): TidegateClient {
      const c = new TidegateClient({
        url: url(),
        WebSocket,
        minReconnectDelayMs: 50,
        maxReconnectDelayMs: 400,
        ...options,
      } as ClientOptions);
      made.push(c);
      return c;
    },
    closeAll(): void {
      for (const c of made) c.close();
    },
  };
}

/**
 * One broker for a test file (started `before`, stopped `after`, with the
 * file's SDK clients closed first): `broker()` is it once started.
 */
export function brokerForFile(config: () => string) {
  let broker: Broker | undefined;
  const clients = sdkClients(() => broker!.wsUrl);
  before(async () => {
    broker = await startBroker(config());
  });
  after(async () => {
    clients.closeAll();
    await broker?.stop();
  });
  return { broker: () => broker!, clients };
}
