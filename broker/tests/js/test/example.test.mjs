// examples/graphql.mjs, as a user runs it, against the release broker: it
// publishes with the mutation and prints the message its subscription
// received (scripts/test installs the example's packages first).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { API_KEY, REPO_ROOT, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  broker = await startBroker();
});
after(async () => broker?.stop());

test("examples/graphql.mjs subscribes and publishes over graphql-ws", async () => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [join(REPO_ROOT, "examples", "graphql.mjs"), API_KEY, "doc:example", broker.url],
    { timeout: 20_000 },
  );
  const lines = stdout.trim().split("\n");
  const second = Number(/^published seq (\d+)$/.exec(lines[1])?.[1]);
  const got = JSON.parse(lines[2]);
  assert.equal(got.seq, second, stdout);
  assert.deepEqual(got.data, { text: "world" });
  assert.equal(got.extensions.recovered, true);
});
