import { test } from "node:test";
import assert from "node:assert/strict";
import { parseRetryAfter } from "../../src/transports/websocket.js";
import { tokenExpiryMs } from "../../src/token.js";
import { TidegateError } from "../../src/errors.js";

test("Retry-After is read as seconds or as an HTTP date", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(" 1.5 "), 1500);
  const now = Date.parse("Sun, 30 Nov 2025 10:00:00 GMT");
  assert.equal(parseRetryAfter("Sun, 30 Nov 2025 10:00:07 GMT", now), 7000);
  assert.equal(parseRetryAfter("Sun, 30 Nov 2025 09:00:00 GMT", now), 0, "a past date means now");
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(undefined), undefined);
});

test("a JWT's exp is read without verifying it; junk gives undefined", () => {
  const payload = Buffer.from(JSON.stringify({ sub: "acme", exp: 1_900_000_000 })).toString("base64url");
  assert.equal(tokenExpiryMs(`h.${payload}.s`), 1_900_000_000_000);
  assert.equal(tokenExpiryMs("not-a-jwt"), undefined);
  assert.equal(tokenExpiryMs("a.%%%.c"), undefined);
});

test("TidegateError carries the code, whether it is temporary, and details", () => {
  const e = new TidegateError("rate_limited", "dropped", { id: 7, attempts: 3, retryAfterMs: 50 });
  assert.ok(e instanceof Error);
  assert.equal(e.name, "TidegateError");
  assert.equal(e.code, "rate_limited");
  assert.equal(e.temporary, true);
  assert.equal(e.id, 7);
  assert.equal(e.attempts, 3);
  assert.equal(new TidegateError("forbidden", "no").temporary, false);
  assert.equal(new TidegateError("queue_full", "full").temporary, true);
});
