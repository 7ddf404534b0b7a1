/** When the SDK refreshes a token on the socket (src/refresh.ts). */
import { test } from "node:test";
import assert from "node:assert/strict";
import { refreshDelay, retryDelay } from "../../src/refresh.js";

test("a token is refreshed at 80% of its life, or 30 s before it expires when that is earlier", () => {
  const none = () => 0;
  assert.equal(refreshDelay(3_600_000, none), 2_880_000, "an hour: at 48 min");
  assert.equal(refreshDelay(100_000, none), 70_000, "100 s: 30 s before is earlier than 80 s");
  assert.equal(refreshDelay(60_000, none), 30_000, "60 s: both say 30 s");
  assert.equal(refreshDelay(40_000, none), 20_000, "40 s: not before half its life");
  assert.equal(refreshDelay(4_000, none), 2_000, "a 4-s token: at 2 s, not at once");
  assert.equal(refreshDelay(0, none), 0);
  assert.equal(refreshDelay(-5, none), 0);
});

test("jitter only ever makes the refresh earlier, by at most 10%", () => {
  const planned = refreshDelay(3_600_000, () => 0);
  for (const r of [0, 0.25, 0.5, 0.999]) {
    const d = refreshDelay(3_600_000, () => r);
    assert.ok(d <= planned && d >= planned * 0.9, `${r}: ${d}`);
  }
});

test("a failed refresh is tried again while there is time", () => {
  assert.equal(retryDelay(60_000), 30_000);
  assert.equal(retryDelay(2_500), 1_250);
  assert.equal(retryDelay(2_100), 1_050);
  assert.equal(retryDelay(1_500), undefined, "no time left: the 4001 reconnect takes over");
});
