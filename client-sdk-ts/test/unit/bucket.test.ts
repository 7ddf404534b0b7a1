import { test } from "node:test";
import assert from "node:assert/strict";
import { TokenBucket } from "../../src/bucket.js";
import { FakeClock } from "../helpers/fake-clock.js";

test("a bucket allows its burst, then refills at its rate", () => {
  const clock = new FakeClock();
  const b = new TokenBucket(5, 10, clock);
  let taken = 0;
  while (b.tryTake(1)) taken += 1;
  assert.equal(taken, 5);
  assert.equal(b.msUntil(1), 100);
  clock.advance(99);
  assert.equal(b.tryTake(1), false);
  clock.advance(1);
  assert.equal(b.tryTake(1), true);
  clock.advance(10_000);
  assert.equal(Math.round(b.available()), 5, "never above capacity");
});

test("clampTo lowers but never raises the balance; reshape keeps it within capacity", () => {
  const clock = new FakeClock();
  const b = new TokenBucket(10, 10, clock);
  b.clampTo(3);
  assert.equal(b.available(), 3);
  b.clampTo(8);
  assert.equal(b.available(), 3);
  b.reshape(2, 1);
  assert.equal(b.available(), 2);
  assert.equal(b.capacity, 2);
  b.clampTo(0);
  assert.equal(b.msUntil(1), 1000);
});

test("emptyFor makes exactly one token available after the server's retryAfterMs", () => {
  const clock = new FakeClock();
  const b = new TokenBucket(18, 18, clock);
  b.emptyFor(50);
  assert.equal(b.tryTake(1), false);
  assert.equal(b.msUntil(1), 50);
  clock.advance(49);
  assert.equal(b.tryTake(1), false);
  clock.advance(1);
  assert.equal(b.tryTake(1), true);
  assert.equal(b.tryTake(1), false, "only one");
  b.emptyFor(1000);
  b.clampTo(5);
  assert.ok(b.available() < 0, "a budget frame does not cancel the wait");
});
