import { test } from "node:test";
import assert from "node:assert/strict";
import { backoff, backoffCeiling } from "../../src/backoff.js";

test("backoff ceiling doubles from min and stops at max", () => {
  const ceilings = [0, 1, 2, 3, 4, 5, 6, 10, 40].map((s) => backoffCeiling(s, 500, 10_000));
  assert.deepEqual(ceilings, [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000, 10_000]);
});

test("full jitter stays in [0, ceiling) for the extremes of random()", () => {
  for (let step = 0; step < 12; step += 1) {
    const ceiling = backoffCeiling(step, 1000, 30_000);
    assert.equal(backoff(step, 1000, 30_000, () => 0), 0);
    const top = backoff(step, 1000, 30_000, () => 0.999999);
    assert.ok(top < ceiling && top >= ceiling - 1, `step ${step}: ${top} vs ${ceiling}`);
  }
});

test("full jitter spreads draws over the whole window (not clustered at the ceiling)", () => {
  const step = 4;
  const ceiling = backoffCeiling(step, 1000, 30_000); // 16 s
  const draws = Array.from({ length: 20_000 }, () => backoff(step, 1000, 30_000));
  assert.ok(draws.every((d) => d >= 0 && d < ceiling), "a draw left the window");
  const mean = draws.reduce((a, b) => a + b, 0) / draws.length;
  assert.ok(Math.abs(mean - ceiling / 2) < ceiling * 0.05, `mean ${mean} not near ${ceiling / 2}`);
  // Ten equal bins each hold roughly a tenth: the reconnect wave is flat.
  const bins = new Array(10).fill(0);
  for (const d of draws) bins[Math.floor((d / ceiling) * 10)] += 1;
  for (const b of bins) assert.ok(b > 1500 && b < 2500, `uneven bins ${bins}`);
});

test("negative or huge steps do not escape the bounds", () => {
  assert.equal(backoffCeiling(-3, 1000, 30_000), 1000);
  assert.equal(backoffCeiling(10_000, 1000, 30_000), 30_000);
  assert.ok(Number.isFinite(backoff(10_000, 1000, 30_000, () => 0.5)));
});
