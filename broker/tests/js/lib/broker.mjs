// Runs the real broker (`tidegate serve`) as a child process on
// 127.0.0.1:0 with the repository's config.toml plus `extra` TOML, and
// stops it by its PID. Fails (never skips) when the binary is missing.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(new URL(".", import.meta.url));
export const REPO_ROOT = resolve(HERE, "../../../..");
export const TIDEGATE_BIN = resolve(REPO_ROOT, process.env.TIDEGATE_BIN ?? "target/release/tidegate");
export const API_KEY = "tidegate-sample-publish-key";

/** The shipped config with the `[plans.free]` keys `planFree` names replaced, and `extra` TOML after it. */
function configWith(planFree, extra) {
  let lines = readFileSync(join(REPO_ROOT, "config.toml"), "utf8").split("\n");
  const header = lines.findIndex((l) => l.trim() === "[plans.free]");
  for (const [k, v] of Object.entries(planFree)) {
    const at = lines.findIndex((l, i) => i > header && new RegExp(`^${k}\\s*=`).test(l));
    lines[at] = `${k} = ${JSON.stringify(v)}`;
  }
  return `${lines.join("\n")}\n${extra}`;
}

export async function startBroker(planFree = {}, extra = "") {
  if (!existsSync(TIDEGATE_BIN)) {
    throw new Error(
      `the tidegate binary is missing at ${TIDEGATE_BIN}: run \`cargo build --release -p tidegate\` (or set TIDEGATE_BIN)`,
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "tidegate-graphql-"));
  const configPath = join(dir, "config.toml");
  writeFileSync(configPath, configWith(planFree, extra));
  const child = spawn(TIDEGATE_BIN, ["serve", "--config", configPath, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
  let log = "";
  child.stderr.on("data", (d) => (log = (log + d.toString()).slice(-20_000)));
  const exited = new Promise((r) => child.on("exit", (code) => r(code)));
  const url = await new Promise((ok, fail) => {
    const guard = setTimeout(() => fail(new Error(`broker did not start in 15 s:\n${log}`)), 15_000);
    createInterface({ input: child.stdout }).on("line", (line) => {
      log += `${line}\n`;
      const m = /tidegate listening on (http:\/\/\S+)/.exec(line);
      if (m) {
        clearTimeout(guard);
        ok(m[1].replace(/\/$/, ""));
      }
    });
    void exited.then((code) => {
      clearTimeout(guard);
      fail(new Error(`broker exited (${code}) before listening:\n${log}`));
    });
  });
  return {
    url,
    output: () => log,
    async stop() {
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
