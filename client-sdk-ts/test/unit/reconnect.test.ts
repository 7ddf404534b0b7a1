import { test } from "node:test";
import assert from "node:assert/strict";
import { MAX_RETRY_AFTER_MS, planReconnect, type ReconnectInput } from "../../src/reconnect.js";
import { CLOSE_CODES } from "../../src/codes.js";
import { backoffCeiling } from "../../src/backoff.js";

const settings = {
  minDelayMs: 1000,
  maxDelayMs: 30_000,
  accountLimitedDelayMs: 30_000,
  connectionCapDelayMs: 5000,
  stableAfterMs: 10_000,
};
const top = () => 0.999999;
const bottom = () => 0;

function plan(input: Partial<ReconnectInput>, random = top) {
  return planReconnect(
    { code: 1006, wasOpen: true, step: 0, hasGetToken: false, ...input },
    settings,
    random,
  );
}

test("1012, 1013, 1001, 4008 and 1011 reconnect with full jitter from the minimum", () => {
  for (const code of [1012, 1013, 1001, 4008, 1011]) {
    const d = plan({ code, connectedForMs: 60_000, step: 4 });
    assert.equal(d.policy, "jittered", `code ${code}`);
    assert.equal(d.floorMs, 0);
    assert.ok(d.delayMs < settings.minDelayMs, `a stable connection resets the step (${code})`);
    assert.equal(plan({ code, connectedForMs: 60_000 }, bottom).delayMs, 0);
  }
});

test("a connection that did not last keeps growing the backoff window", () => {
  const windows = [0, 1, 2, 3, 4, 5, 6].map((step) => plan({ code: 1013, connectedForMs: 50, step }));
  for (const [step, d] of windows.entries()) {
    const ceiling = backoffCeiling(step, settings.minDelayMs, settings.maxDelayMs);
    assert.ok(d.delayMs < ceiling && d.delayMs >= ceiling - 1, `step ${step}: ${d.delayMs}`);
    assert.equal(d.nextStep, step + 1);
  }
});

test("1008 backs off long and says account_rate_limited", () => {
  const d = plan({ code: CLOSE_CODES.POLICY_VIOLATION, connectedForMs: 60_000 }, bottom);
  assert.equal(d.policy, "long_backoff");
  assert.equal(d.accountRateLimited, true);
  assert.ok(d.delayMs >= settings.accountLimitedDelayMs);
  const later = plan({ code: 1008, connectedForMs: 60_000, step: 3 });
  assert.ok(later.delayMs >= settings.accountLimitedDelayMs + 7000, "1008 does not reset the step");
});

test("4029 waits at least the server's hint, or the configured floor", () => {
  const hinted = plan({ code: CLOSE_CODES.CONNECTION_CAP, retryAfterHintMs: 12_000 }, bottom);
  assert.equal(hinted.floorMs, 12_000);
  assert.ok(hinted.delayMs >= 12_000);
  const bare = plan({ code: CLOSE_CODES.CONNECTION_CAP }, bottom);
  assert.equal(bare.floorMs, settings.connectionCapDelayMs);
});

test("1002, 1007 and 1009 are 'fix': reconnect, but never reset the step", () => {
  for (const code of [CLOSE_CODES.PROTOCOL_ERROR, CLOSE_CODES.INVALID_UTF8, CLOSE_CODES.MESSAGE_TOO_BIG]) {
    const d = plan({ code, connectedForMs: 60_000, step: 2 });
    assert.equal(d.policy, "fix");
    assert.equal(d.terminal, undefined);
    assert.ok(d.delayMs >= 3000, "step kept");
  }
});

test("handshake 429 and 503 wait at least Retry-After, plus jitter", () => {
  for (const status of [429, 503]) {
    const d = plan({ wasOpen: false, refusal: { status, retryAfterMs: 7000 } }, bottom);
    assert.equal(d.policy, "refused");
    assert.equal(d.floorMs, 7000);
    assert.ok(d.delayMs >= 7000);
    const withJitter = plan({ wasOpen: false, refusal: { status, retryAfterMs: 7000 } });
    assert.ok(withJitter.delayMs > 7000 && withJitter.delayMs < 8000);
  }
  const noHeader = plan({ wasOpen: false, refusal: { status: 429 } }, bottom);
  assert.ok(noHeader.floorMs > 0, "a 429 without Retry-After still waits");
});

test("401 asks getToken() again, or stops when there is none", () => {
  const withGetter = plan({ wasOpen: false, refusal: { status: 401, code: "unauthorized" }, hasGetToken: true });
  assert.equal(withGetter.refreshToken, true);
  assert.equal(withGetter.terminal, undefined);
  const without = plan({ wasOpen: false, refusal: { status: 401, code: "unknown_plan" } });
  assert.equal(without.terminal?.code, "unknown_plan");
});

test("an unreadable refusal (browser 1006 before open) backs off and refreshes the token", () => {
  const d = plan({ code: 1006, wasOpen: false, hasGetToken: true, step: 2 });
  assert.equal(d.policy, "refused");
  assert.equal(d.refreshToken, true);
  assert.ok(d.delayMs >= 3000 && d.delayMs < 4000);
  assert.equal(plan({ code: 1006, wasOpen: false }).refreshToken, false);
});

test("4003 reconnects with the normal backoff; a ban says banned, a disconnect does not", () => {
  const banned = plan({ code: CLOSE_CODES.OPERATOR, reason: "banned", connectedForMs: 60_000 }, bottom);
  assert.equal(banned.policy, "jittered");
  assert.equal(banned.banned, true);
  assert.equal(banned.floorMs, 0);
  const kicked = plan({ code: CLOSE_CODES.OPERATOR, reason: "disconnected", connectedForMs: 60_000 });
  assert.equal(kicked.policy, "jittered");
  assert.equal(kicked.banned, false);
  assert.ok(kicked.delayMs < settings.minDelayMs);
});

test("a 403 banned handshake is surfaced and retried with a growing backoff, not the ban's length", () => {
  const refusal = { status: 403, code: "banned", retryAfterMs: 600_000 };
  const first = plan({ wasOpen: false, refusal, step: 0 });
  assert.equal(first.policy, "refused");
  assert.equal(first.banned, true);
  assert.equal(first.floorMs, 0, "a ban can be lifted early");
  assert.equal(first.terminal, undefined);
  const later = plan({ wasOpen: false, refusal, step: 6 });
  assert.ok(later.delayMs > first.delayMs);
  assert.ok(later.delayMs <= settings.maxDelayMs);
});

test("a wait the server asks for is capped at maxRetryAfterMs (60 s by default)", () => {
  const refused = (retryAfterMs: number): Partial<ReconnectInput> => ({
    wasOpen: false,
    refusal: { status: 429, code: "too_many_connections", retryAfterMs },
  });
  assert.equal(MAX_RETRY_AFTER_MS, 60_000);
  assert.equal(plan(refused(86_400_000), bottom).floorMs, 60_000);
  assert.equal(plan(refused(2_000), bottom).floorMs, 2_000);
  const tight = planReconnect(
    { code: 1006, step: 0, hasGetToken: false, ...refused(86_400_000) } as ReconnectInput,
    { ...settings, maxRetryAfterMs: 5_000 },
    bottom,
  );
  assert.equal(tight.floorMs, 5_000);
  const hinted = plan({ code: CLOSE_CODES.CONNECTION_CAP, retryAfterHintMs: 3_600_000 }, bottom);
  assert.equal(hinted.floorMs, 60_000);
});

test("4001 asks getToken() for a new token, or stops without one", () => {
  const expired = { code: CLOSE_CODES.TOKEN_EXPIRED, reason: "token expired" };
  const renewable = plan({ ...expired, hasGetToken: true });
  assert.equal(renewable.refreshToken, true);
  assert.equal(renewable.terminal, undefined);
  const fixed = plan(expired);
  assert.equal(fixed.terminal?.code, "unauthorized");
});
