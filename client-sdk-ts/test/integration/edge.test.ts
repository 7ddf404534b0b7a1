/**
 * examples/edge/run.sh end to end: nginx (Debian's package) in front of
 * two real nodes on loopback. Over the per-IP limit nginx answers 429
 * before a broker sees the upgrade; under it the broker's per-IP cap acts
 * on the real client address from X-Forwarded-For.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { REPO_ROOT, requireBroker } from "../helpers/broker.js";

test("the edge example stops a flood at nginx and the broker caps the real client address", async () => {
  const bin = requireBroker();
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      "bash",
      [join(REPO_ROOT, "examples", "edge", "run.sh")],
      { env: { ...process.env, TIDEGATE_BIN: bin }, timeout: 90_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
  assert.equal(code, 0, `run.sh failed:\n${stdout}\n${stderr}`);
  const line = stdout.split("\n").find((l) => l.startsWith("{"));
  assert.ok(line, stdout);
  const summary = JSON.parse(line!);
  assert.ok(summary.flood.refusedAtEdge > 0, line);
  assert.ok(summary.flood.admitted < summary.flood.attempts, line);
  assert.equal(summary.perClient.refusedByBroker, true, line);
  assert.match(summary.perClient.brokerMessage, /127\.0\.0\.3/);
  assert.equal(summary.otherClientAdmitted, true, line);
});
