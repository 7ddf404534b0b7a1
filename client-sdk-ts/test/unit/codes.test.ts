/**
 * codes.ts must stay equal to the broker's table in
 * broker/src/protocol/codes.rs (the Rust side checks the same in
 * broker/tests/codes_sync.rs).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  CLOSE_CODES,
  CLOSE_POLICY,
  ERROR_CODES,
  TEMPORARY_ERROR_CODES,
  closePolicy,
} from "../../src/codes.js";

// build/test/unit → repo root is four levels up from this compiled file.
const RUST = fileURLToPath(new URL("../../../../broker/src/protocol/codes.rs", import.meta.url));
const rust = readFileSync(RUST, "utf8");

/** The body of `fn NAME` (up to the next `pub const fn` / `}` at its indent). */
function fnBody(name: string): string {
  const start = rust.indexOf(`fn ${name}(`);
  assert.ok(start >= 0, `fn ${name} not found in codes.rs`);
  const next = rust.indexOf("\n    pub const fn", start + 1);
  const implEnd = rust.indexOf("\n}\n", start);
  const end = [next, implEnd].filter((i) => i > 0).sort((a, b) => a - b)[0];
  return rust.slice(start, end);
}

function matchArms(body: string, valuePattern: string): Array<[string, string]> {
  const re = new RegExp(`(\\w+)::(\\w+)\\s*=>\\s*${valuePattern}`, "g");
  return [...body.matchAll(re)].map((m) => [m[2]!, m[3]!]);
}

test("ERROR_CODES lists every ErrorCode::as_str string in the Rust order", () => {
  const strings = matchArms(fnBody("as_str"), '"([a-z_]+)"').map(([, s]) => s);
  assert.ok(strings.length >= 10, "parsed too few error codes from codes.rs");
  assert.deepEqual([...ERROR_CODES], strings);
});

test("CLOSE_CODES maps every CloseCode::name to its code() in the Rust order", () => {
  const codes = new Map(matchArms(fnBody("code"), "(\\d+)"));
  const names = matchArms(fnBody("name"), '"([A-Z_0-9]+)"');
  assert.ok(names.length >= 5, "parsed too few close codes from codes.rs");
  const expected = names.map(([variant, name]) => [name, Number(codes.get(variant))]);
  assert.deepEqual(Object.entries(CLOSE_CODES), expected);
});

test("TEMPORARY_ERROR_CODES equals ErrorCode::temporary()", () => {
  const asStr = new Map(matchArms(fnBody("as_str"), '"([a-z_]+)"'));
  const body = fnBody("temporary");
  const variants = [...body.matchAll(/ErrorCode::(\w+)/g)].map((m) => m[1]!);
  const expected = new Set(variants.map((v) => asStr.get(v)));
  assert.deepEqual(new Set(TEMPORARY_ERROR_CODES), expected);
});

test("CLOSE_POLICY follows CloseCode::reconnect()", () => {
  const names = new Map(matchArms(fnBody("name"), '"([A-Z_0-9]+)"'));
  const body = fnBody("reconnect");
  const policyOf: Record<string, string> = {
    Jittered: "jittered",
    LongBackoff: "long_backoff",
    Fix: "fix",
  };
  const explicit = new Map<string, string>();
  let fallback = "";
  for (const arm of body.matchAll(/([^{}\n]*?)=>\s*\{?\s*Reconnect::(\w+)/g)) {
    const lhs = arm[1]!;
    const policy = policyOf[arm[2]!]!;
    if (lhs.trim() === "_") fallback = policy;
    for (const v of lhs.matchAll(/CloseCode::(\w+)/g)) explicit.set(v[1]!, policy);
  }
  assert.ok(fallback, "no `_ =>` arm found in reconnect()");
  for (const [variant, name] of names) {
    const code = CLOSE_CODES[name as keyof typeof CLOSE_CODES];
    const want = explicit.get(variant) ?? fallback;
    assert.equal(CLOSE_POLICY[code], want, `${name} (${code})`);
    assert.equal(closePolicy(code), want);
  }
  assert.equal(closePolicy(4999), "jittered", "unknown codes reconnect with jitter");
});
