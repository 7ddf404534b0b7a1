#!/usr/bin/env node
// Runs every command of README.md's ```sh blocks, as written, in a fresh
// copy of the repository (the files git tracks, as they are in the work
// tree), and checks what each prints. A command the README gains without
// an expectation here fails the check, so the two stay in step.
//
//   node scripts/readme-check.mjs
//
// Only the environment differs from a new user's shell: CARGO_TARGET_DIR
// points at this checkout's target/ (so dependencies are not compiled
// again), and `cargo install` installs into a scratch root put first on
// PATH. The broker the README starts listens on free ports
// (TIDEGATE_NODE_LISTEN and TIDEGATE_GRPC_LISTEN set to 127.0.0.1:0 for
// that command only), and the commands that talk to it have 127.0.0.1:8080
// replaced by the address it printed: a broker the user already runs on
// 8080 (the README's own first command) neither breaks the check nor is
// talked to by it. `./scripts/test` is the one command not run: it is what
// runs this check.
import { execFileSync, spawn } from "node:child_process";
import { accessSync, constants, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("..", import.meta.url));
const WORK = join(REPO, "target", "readme-check");
const CLONE = join(WORK, "clone");
const INSTALL_ROOT = join(WORK, "install");
const STEP_MS = 600_000; // a first `cargo run` may compile the crate
const EVENT_MS = 20_000;

/** The README's shell commands, in order, with `\` continuations joined. */
function readmeCommands(text) {
  const commands = [];
  for (const block of text.matchAll(/```sh\n([\s\S]*?)```/g)) {
    let pending = "";
    for (const line of block[1].split("\n")) {
      if (!pending && (line.trim() === "" || line.trim().startsWith("#"))) continue;
      if (line.endsWith("\\")) {
        pending += `${line}\n`;
        continue;
      }
      commands.push(pending + line);
      pending = "";
    }
  }
  return commands;
}

/** A fresh copy: every file git tracks, nothing else. */
function freshCopy() {
  rmSync(CLONE, { recursive: true, force: true });
  mkdirSync(CLONE, { recursive: true });
  const tar = execFileSync("bash", [
    "-c",
    "git ls-files -z | tar --null --ignore-failed-read -T - -cf -",
  ], { cwd: REPO, maxBuffer: 1 << 30 });
  execFileSync("tar", ["-xf", "-"], { cwd: CLONE, input: tar });
}

const env = {
  ...process.env,
  CARGO_TARGET_DIR: join(REPO, "target"),
  CARGO_INSTALL_ROOT: INSTALL_ROOT,
  PATH: `${join(INSTALL_ROOT, "bin")}:${process.env.PATH}`,
};
delete env.TIDEGATE_JWT_SECRET;
const background = [];
const vars = {};

/** Runs `command` with bash in the copy; resolves with its stdout. */
function run(command) {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-o", "pipefail", "-c", command], {
      cwd: CLONE,
      env: { ...env, ...vars },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const guard = setTimeout(() => child.kill("SIGKILL"), STEP_MS);
    child.on("exit", (code) => {
      clearTimeout(guard);
      if (code === 0) resolve(out);
      else reject(new Error(`exit ${code}\n${out}${err}`));
    });
  });
}

/**
 * Starts `command` in the background (its own process group, ended by PID
 * at the end) and returns a function that waits for a line matching `re`.
 */
function start(command, extraEnv = {}) {
  const child = spawn("bash", ["-c", `exec ${command}`], {
    cwd: CLONE,
    env: { ...env, ...vars, ...extraEnv },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  background.push(child);
  const lines = [];
  const waiters = [];
  let stderr = "";
  child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  createInterface({ input: child.stdout }).on("line", (line) => {
    lines.push(line);
    for (const w of waiters) w();
  });
  return (re, ms = EVENT_MS) =>
    new Promise((resolve, reject) => {
      const check = () => {
        const hit = lines.find((l) => re.test(l));
        if (hit !== undefined) {
          clearTimeout(guard);
          resolve(hit);
        }
      };
      const guard = setTimeout(
        () => reject(new Error(`no line matching ${re} from \`${command}\` in ${ms} ms:\n${lines.join("\n")}\n${stderr}`)),
        ms,
      );
      waiters.push(check);
      child.on("exit", (code) => {
        clearTimeout(guard);
        reject(new Error(`\`${command}\` exited (${code}) before printing ${re}:\n${lines.join("\n")}\n${stderr}`));
      });
      check();
    });
}

function expect(ok, what) {
  if (!ok) throw new Error(what);
}

let subscriber;
/** The README's `curl -N` SSE stream (§14). */
let stream;
/** Where the README's broker listens here (`127.0.0.1:<free port>`). */
let broker;
const README_ADDR = "127.0.0.1:8080";

/** `command` pointed at the broker this check started. */
function local(command) {
  expect(broker, "the broker runs before the commands that use it");
  return command.replaceAll(README_ADDR, broker);
}

/** What each README command must do, matched on the command's text. */
const EXPECTATIONS = [
  {
    match: /^cargo run --release -p tidegate -- serve\b/,
    async check(command) {
      const lines = start(command, {
        TIDEGATE_NODE_LISTEN: "127.0.0.1:0",
        TIDEGATE_GRPC_LISTEN: "127.0.0.1:0",
      });
      const line = await lines(/^tidegate listening on http:\/\/127\.0\.0\.1:\d+$/, STEP_MS);
      broker = line.slice("tidegate listening on http://".length);
    },
  },
  {
    match: /^\.\/scripts\/test\b/,
    async check() {
      accessSync(join(CLONE, "scripts", "test"), constants.X_OK);
    },
  },
  {
    match: /^TOKEN=\$\(cargo run -q --release -p tidegate -- token /,
    async check(command) {
      vars.TOKEN = (await run(`${command}\nprintf '%s' "$TOKEN"`)).trim();
      const parts = vars.TOKEN.split(".");
      expect(parts.length === 3, `TOKEN is not a JWT: ${vars.TOKEN}`);
      const claims = JSON.parse(Buffer.from(parts[1], "base64url").toString());
      expect(claims.sub === "acme", `token for ${claims.sub}`);
    },
  },
  {
    match: /^node examples\/subscribe\.mjs "\$TOKEN" doc:42$/,
    async check(command) {
      subscriber = start(`${local(command)} ws://${broker}/v1/ws`);
      await subscriber(/^\{"type":"welcome".*"account":"acme"/);
      // The ack carries the channel's position (§11).
      await subscriber(/^\{"type":"ack","id":1,"seq":\d+\}$/);
    },
  },
  {
    match: /^curl -N -H "Authorization: Bearer \$TOKEN" 'http:\/\/127\.0\.0\.1:8080\/v1\/sse\?channel=doc:42'$/,
    async check(command) {
      stream = start(local(command));
      await stream(/^event: welcome$/);
      await stream(/^data: \{"type":"welcome".*"account":"acme"/);
    },
  },
  {
    match: /^curl -s -X POST http:\/\/127\.0\.0\.1:8080\/v1\/publish /,
    async check(command) {
      const out = await run(local(command));
      expect(/^\{"seq":\d+\}$/.test(out.trim()), `publish printed ${out}`);
      expect(subscriber, "the subscriber runs before the publish");
      await subscriber(/^\{"type":"message","channel":"doc:42","seq":\d+,"data":\{"text":"hello"\}\}$/);
      expect(stream, "the SSE stream runs before the publish");
      await stream(/^data: \{"channel":"doc:42","seq":\d+,"data":\{"text":"hello"\}\}$/);
    },
  },
  {
    match: /^cargo install --locked --path broker\b/,
    async check(command) {
      await run(command);
      const version = execFileSync(join(INSTALL_ROOT, "bin", "tidegate"), ["--version"]).toString();
      expect(/^tidegate \d+\.\d+\.\d+/.test(version), `installed binary says ${version}`);
    },
  },
  {
    match: /^TIDEGATE_JWT_SECRET=\S+ tidegate check-config --listen 0\.0\.0\.0:8080$/,
    async check(command) {
      const out = await run(command);
      for (const line of [
        "embedded config.toml: ok",
        'node.listen = "0.0.0.0:8080"  (flag --listen)',
        "(env TIDEGATE_JWT_SECRET)",
        "warning: api_keys: the sample API key is not accepted where node.listen is 0.0.0.0:8080",
      ]) {
        expect(out.includes(line), `check-config did not print ${JSON.stringify(line)}:\n${out}`);
      }
      expect(!out.includes("change-me-to-a-long-random-string"), "check-config printed the secret");
    },
  },
];

async function main() {
  const commands = readmeCommands(readFileSync(join(REPO, "README.md"), "utf8"));
  freshCopy();
  rmSync(INSTALL_ROOT, { recursive: true, force: true });
  let passed = 0;
  let failed = 0;
  for (const command of commands) {
    const first = command.split("\n")[0];
    const expectation = EXPECTATIONS.find((e) => e.match.test(command));
    try {
      expect(expectation, `no expectation in scripts/readme-check.mjs for this README command`);
      await expectation.check(command);
      console.log(`ok   ${first}`);
      passed += 1;
    } catch (e) {
      console.log(`FAIL ${first}\n     ${String(e.message ?? e).replace(/\n/g, "\n     ")}`);
      failed += 1;
    }
  }
  console.log(`readme-check: ${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0;
}

let ok = false;
try {
  ok = await main();
} finally {
  for (const child of background) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // already gone
      }
    }
  }
}
process.exit(ok ? 0 : 1);
