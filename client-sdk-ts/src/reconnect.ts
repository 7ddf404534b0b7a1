/**
 * What to do after a connection ended: a pure function of how it ended, so
 * the whole close-code policy is unit-tested without sockets.
 *
 * delay = floor + backoff(step, min, max): full jitter on top of a floor that
 * the server asked for (`Retry-After`, 1008's long wait, 4029's cap wait).
 * A wait the server asks for is capped at `maxRetryAfterMs` (default
 * {@link MAX_RETRY_AFTER_MS}).
 */
import { backoff } from "./backoff.js";
import {
  CLOSE_CODES,
  closePolicy,
  TOKEN_ERROR_CODES,
  type AnyErrorCode,
  type ReconnectPolicy,
} from "./codes.js";
import type { Refusal } from "./types.js";

export interface ReconnectInput {
  code: number;
  /** The close frame's reason (4003 says `disconnected` or `banned`). */
  reason?: string;
  wasOpen: boolean;
  refusal?: Refusal;
  /** `retryAfterMs` from an error frame received just before the close. */
  retryAfterHintMs?: number;
  /** Backoff step (attempts since the last stable connection). */
  step: number;
  /** How long the connection had been welcomed, when it was. */
  connectedForMs?: number;
  hasGetToken: boolean;
  /**
   * Whether the client connects with a token (default true). A client
   * without one is authenticated by the broker's connect hook from its
   * cookies (§15): a 4001 (the hook's expiry passed) reconnects, and the
   * hook decides again.
   */
  hasToken?: boolean;
}

/** The longest `Retry-After` / `retryAfterMs` the SDK obeys by default. */
export const MAX_RETRY_AFTER_MS = 60_000;

export interface ReconnectSettings {
  /** Cap on any wait the server asks for (default {@link MAX_RETRY_AFTER_MS}). */
  maxRetryAfterMs?: number;
  minDelayMs: number;
  maxDelayMs: number;
  accountLimitedDelayMs: number;
  connectionCapDelayMs: number;
  stableAfterMs: number;
}

export interface ReconnectDecision {
  policy: ReconnectPolicy | "refused";
  /** The least the client waits. */
  floorMs: number;
  delayMs: number;
  /** The backoff step to use next time. */
  nextStep: number;
  /** Ask `getToken()` for a new token before the next attempt. */
  refreshToken: boolean;
  /** Set when reconnecting cannot help: the client stops with this code. */
  terminal?: { code: AnyErrorCode; message: string };
  /** The server closed for the account's budget: surface `account_rate_limited`. */
  accountRateLimited: boolean;
  /**
   * An operator banned the account or address (close 4003 `banned`, or a
   * 403 `banned` handshake): surface `banned`. The client still reconnects
   * with the normal backoff; the handshake answers while the ban lasts.
   */
  banned: boolean;
}

const DEFAULT_REFUSAL_FLOOR_MS = 1000;

export function planReconnect(
  input: ReconnectInput,
  settings: ReconnectSettings,
  random: () => number,
): ReconnectDecision {
  const cap = settings.maxRetryAfterMs ?? MAX_RETRY_AFTER_MS;
  let policy: ReconnectDecision["policy"] = "jittered";
  let floorMs = Math.min(input.retryAfterHintMs ?? 0, cap);
  let refreshToken = false;
  let terminal: ReconnectDecision["terminal"];
  let accountRateLimited = false;
  let banned = false;
  let step = input.step;

  if (input.refusal) {
    policy = "refused";
    const { status, code } = input.refusal;
    if (status === 401 || (code !== undefined && TOKEN_ERROR_CODES.has(code))) {
      if (input.hasGetToken) refreshToken = true;
      else {
        terminal = {
          code: code === "unknown_plan" ? "unknown_plan" : "unauthorized",
          message: `the server refused the token (HTTP ${status}${code ? ` ${code}` : ""}) and there is no getToken() to ask for another`,
        };
      }
    } else if (status === 403 && code === "banned") {
      // No floor from the ban's length: it may be lifted early. The growing
      // backoff keeps a banned client's attempts rare.
      banned = true;
    } else if (status === 403 && code !== undefined) {
      // A connect hook refused (its own code, `forbidden` for its
      // `disconnect`, or `forbidden_origin`, §15): asking again changes
      // nothing until the user does something (logs in), so the client
      // stops with the hook's code and words. A 403 without the broker's
      // JSON code is a proxy's, and is retried like a dropped upgrade.
      terminal = {
        code,
        message: input.refusal.message ?? `the server refused the connection (HTTP 403 ${code})`,
      };
    } else if (status === 429 || status === 503) {
      floorMs = Math.max(floorMs, Math.min(input.refusal.retryAfterMs ?? DEFAULT_REFUSAL_FLOOR_MS, cap));
    }
  } else if (!input.wasOpen) {
    // Browsers see a refused upgrade as 1006 without open: it may have been a
    // 401 as well as a 429, so a fresh token is worth asking for.
    policy = "refused";
    if (input.hasGetToken) refreshToken = true;
  } else {
    policy = closePolicy(input.code);
    if (policy === "long_backoff") {
      floorMs = Math.max(floorMs, settings.accountLimitedDelayMs);
      accountRateLimited = true;
    }
    if (input.code === CLOSE_CODES.OPERATOR && input.reason === "banned") banned = true;
    if (input.code === CLOSE_CODES.TOKEN_EXPIRED && input.hasToken !== false) {
      // The token reached its `exp` on the socket: a new one is needed.
      if (input.hasGetToken) refreshToken = true;
      else {
        terminal = {
          code: "unauthorized",
          message: "the token expired (close 4001) and there is no getToken() to ask for another",
        };
      }
    }
    if (input.code === CLOSE_CODES.CONNECTION_CAP) {
      floorMs = Math.max(floorMs, Math.min(input.retryAfterHintMs ?? settings.connectionCapDelayMs, cap));
    }
    const stable = (input.connectedForMs ?? 0) >= settings.stableAfterMs;
    if (stable && policy === "jittered") step = 0;
  }

  const delayMs =
    floorMs + backoff(step, settings.minDelayMs, settings.maxDelayMs, random);
  return {
    policy,
    floorMs,
    delayMs,
    nextStep: step + 1,
    refreshToken,
    terminal,
    accountRateLimited,
    banned,
  };
}
