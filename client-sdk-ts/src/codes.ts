/**
 * Every error code and close code of the wire contract, in one table.
 *
 * The first two constants mirror `broker/src/protocol/codes.rs` entry for
 * entry and in the same order (`ErrorCode::as_str`, `CloseCode::name` →
 * `CloseCode::code`). `broker/tests/codes_sync.rs` and
 * `test/unit/codes.test.ts` fail when the two drift apart, so keep the shape
 * exactly as it is: one quoted string per line, one `NAME: number,` per line.
 *
 * The SDK's own policy (which codes are temporary, what to do after each
 * close code, the codes the SDK raises itself) lives below the mirrored
 * tables.
 */

export const ERROR_CODES = [
  "rate_limited",
  "account_rate_limited",
  "too_many_subscriptions",
  "forbidden",
  "cost_exceeds_max",
  "bad_request",
  "slow_consumer",
  "unauthorized",
  "unknown_plan",
  "draining",
  "node_overloaded",
  "ip_rate_limited",
  "ip_too_many_connections",
  "handshake_rate_limited",
  "too_many_connections",
  "payload_too_large",
  "not_found",
  "internal",
  "banned",
  "presence_full",
  "hook_unavailable",
  "forbidden_origin",
  "unknown_method",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];
export const CLOSE_CODES = {
  GOING_AWAY: 1001,
  PROTOCOL_ERROR: 1002,
  INVALID_UTF8: 1007,
  POLICY_VIOLATION: 1008,
  MESSAGE_TOO_BIG: 1009,
  INTERNAL_ERROR: 1011,
  SERVICE_RESTART: 1012,
  TRY_AGAIN_LATER: 1013,
  TOKEN_EXPIRED: 4001,
  OPERATOR: 4003,
  SLOW_CONSUMER: 4008,
  CONNECTION_CAP: 4029,
} as const;
export type CloseCodeName = keyof typeof CLOSE_CODES;
export type CloseCode = (typeof CLOSE_CODES)[CloseCodeName];

// ---------------------------------------------------------------------------
// SDK policy (not mirrored from Rust, but derived from the same table).
// ---------------------------------------------------------------------------

/**
 * Codes the SDK raises itself; they never come from the server.
 * - `queue_full`: the client already holds `maxQueue` unsettled publishes
 *   (or `maxQueueBytes` of them).
 * - `timeout`: no answer within the request's `timeoutMs` (for a publish:
 *   its deadline inside the idempotency window; `error.key` is its key).
 * - `disconnected`: the socket closed while a budget or presence read was
 *   in flight, or while a publish was in flight at a close that sending it
 *   again cannot help (1002, 1007, 1009). Other publishes in flight at a
 *   disconnect are sent again with their keys (PROTOCOL.md §17).
 * - `closed`: the client was closed by the application.
 * - `token_error`: `getToken()` threw or returned something that is not a token.
 * - `unsupported_transport`: the request needs a WebSocket (presence reads,
 *   `requestBudget()`) and the client is on the SSE stream (PROTOCOL.md §14).
 */
export const CLIENT_ERROR_CODES = [
  "queue_full",
  "timeout",
  "disconnected",
  "closed",
  "token_error",
  "unsupported_transport",
] as const;
export type ClientErrorCode = (typeof CLIENT_ERROR_CODES)[number];

/**
 * A code a backend hook chose (PROTOCOL.md §15: any lower_snake_case code in
 * its `{"error":{"code",…}}` answer), passed to the client as it is.
 * Typed as a string that keeps the known codes' autocompletion.
 */
export type HookErrorCode = string & { readonly __hookCode?: never };

/** Any code a `TidegateError` can carry. */
export type AnyErrorCode = ErrorCode | ClientErrorCode | HookErrorCode;

/**
 * Whether the same request can succeed later without change: mirrors
 * `ErrorCode::temporary()` in codes.rs (the Rust sync test checks it too).
 */
export const TEMPORARY_ERROR_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "rate_limited",
  "account_rate_limited",
  "slow_consumer",
  "draining",
  "node_overloaded",
  "ip_rate_limited",
  "ip_too_many_connections",
  "handshake_rate_limited",
  "too_many_connections",
  "internal",
  "banned",
  "hook_unavailable",
]);

const CLIENT_TEMPORARY: ReadonlySet<ClientErrorCode> = new Set<ClientErrorCode>([
  "queue_full",
  "timeout",
  "disconnected",
]);

/** True when retrying the same operation later may succeed. */
export function isTemporary(code: AnyErrorCode): boolean {
  return (
    TEMPORARY_ERROR_CODES.has(code as ErrorCode) || CLIENT_TEMPORARY.has(code as ClientErrorCode)
  );
}

/**
 * What the client does after the server closed an open socket, mirroring
 * `CloseCode::reconnect()` in codes.rs:
 * - `jittered`: reconnect with full-jitter backoff from the minimum delay.
 * - `long_backoff`: the account was over its budget (1008): wait at least
 *   `accountLimitedDelayMs`, plus jitter, and surface `account_rate_limited`.
 * - `fix`: the frame that caused it would fail again; it is rejected, never
 *   resent, and the client reconnects with backoff (without resetting it).
 */
export type ReconnectPolicy = "jittered" | "long_backoff" | "fix";

export const CLOSE_POLICY: Readonly<Record<CloseCode, ReconnectPolicy>> = {
  [CLOSE_CODES.GOING_AWAY]: "jittered",
  [CLOSE_CODES.PROTOCOL_ERROR]: "fix",
  [CLOSE_CODES.INVALID_UTF8]: "fix",
  [CLOSE_CODES.POLICY_VIOLATION]: "long_backoff",
  [CLOSE_CODES.MESSAGE_TOO_BIG]: "fix",
  [CLOSE_CODES.INTERNAL_ERROR]: "jittered",
  [CLOSE_CODES.SERVICE_RESTART]: "jittered",
  [CLOSE_CODES.TRY_AGAIN_LATER]: "jittered",
  [CLOSE_CODES.TOKEN_EXPIRED]: "jittered",
  [CLOSE_CODES.OPERATOR]: "jittered",
  [CLOSE_CODES.SLOW_CONSUMER]: "jittered",
  [CLOSE_CODES.CONNECTION_CAP]: "jittered",
};

/** The policy for any close code; codes outside the table reconnect with jitter. */
export function closePolicy(code: number): ReconnectPolicy {
  return (CLOSE_POLICY as Record<number, ReconnectPolicy>)[code] ?? "jittered";
}

/** The table name of a close code (`"SERVICE_RESTART"`), or undefined. */
export function closeCodeName(code: number): CloseCodeName | undefined {
  for (const [name, value] of Object.entries(CLOSE_CODES)) {
    if (value === code) return name as CloseCodeName;
  }
  return undefined;
}

/** Handshake refusals that a new token can fix (HTTP 401 bodies). */
export const TOKEN_ERROR_CODES: ReadonlySet<string> = new Set(["unauthorized", "unknown_plan"]);
