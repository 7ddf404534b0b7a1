/**
 * A real `redis-server` on a free port for one test file, killed by its PID
 * (never the machine's shared one).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

export interface Redis {
  url: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "tidegate-sdk-redis-"));
  const child: ChildProcess = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", ""],
    { stdio: ["ignore", "pipe", "ignore"] },
  );
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  await new Promise<void>((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error("redis-server did not start in 10 s")), 10_000);
    child.once("error", (e) => {
      clearTimeout(guard);
      reject(new Error(`cannot start redis-server (${e.message}); apt-get install -y redis-server`));
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.includes("Ready to accept connections")) {
        clearTimeout(guard);
        resolve();
      }
    });
  });
  return {
    url: `redis://127.0.0.1:${port}/`,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
