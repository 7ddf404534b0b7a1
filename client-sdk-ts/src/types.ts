/**
 * Client options, results and the typed event map; the wire frames
 * (PROTOCOL.md §2–3) are in `protocol.ts`, re-exported here.
 */
import type { MemberEvent, PresenceStatsResult } from "./presence.js";
import type { AnyErrorCode } from "./codes.js";
import type { BudgetFrame, Json, MessageFrame, WelcomeFrame } from "./protocol.js";
import type { TidegateError } from "./errors.js";
import type { Clock } from "./clock.js";
import type {
  FetchLike,
  Refusal,
  TransportFactory,
  WebSocketConstructor,
  WebSocketLike,
} from "./transport.js";

export type { Refusal, WebSocketConstructor, WebSocketLike };

export type * from "./protocol.js";

// --------------------------------------------------------------- options ---

export interface ClientOptions {
  /** `ws://host:port/v1/ws` or `wss://…`. */
  url: string;
  /**
   * A fixed token. Use `getToken` instead when tokens expire. Without
   * either, the client connects without a token: a page served by the
   * same site as the broker then sends its cookies with the handshake, and
   * the broker's connect hook (PROTOCOL.md §15) reads the session from them.
   */
  token?: string;
  /**
   * Called before the first connection; before the token expires (from
   * `welcome.tokenExpiresAt`: at 80% of its remaining life or 30 s before
   * `exp`, whichever is earlier, minus up to 10% jitter), to send the new
   * token on the open socket (`refresh`) without reconnecting; and again
   * when the server refused the token (HTTP 401), closed the socket because
   * it expired (4001), when a refusal could not be read (browsers) or when
   * the token's `exp` has passed.
   */
  getToken?: () => string | Promise<string>;
  /** WebSocket implementation; defaults to `globalThis.WebSocket`. In Node pass `ws`. */
  WebSocket?: WebSocketConstructor;
  /**
   * `"auto"` (default): WebSocket, falling back to the SSE stream
   * (`GET /v1/sse` + `POST /v1/client/publish`) when upgrades fail or are
   * cut before `welcome`; `"websocket"` or `"sse"` to force one; or a
   * custom transport (overrides `WebSocket`). Over SSE, presence reads and
   * `requestBudget()` reject with `unsupported_transport`.
   */
  transport?: "auto" | "websocket" | "sse" | TransportFactory;
  /** `fetch` for the SSE transport; defaults to `globalThis.fetch`. */
  fetch?: FetchLike;
  /** Smallest backoff ceiling (full jitter: first delay is in [0, min)). Default 1000 ms. */
  minReconnectDelayMs?: number;
  /** Largest backoff ceiling. Default 30000 ms. */
  maxReconnectDelayMs?: number;
  /** Floor added before jitter after close 1008 (account over budget). Default 30000 ms. */
  accountLimitedDelayMs?: number;
  /** Floor after close 4029 when the server did not say how long. Default 5000 ms. */
  connectionCapDelayMs?: number;
  /** Reconnect automatically after a close. Default true. */
  reconnect?: boolean;
  /** A connection that lived this long resets the backoff step. Default 10000 ms. */
  stableAfterMs?: number;
  /** Wait for the `welcome` frame after the socket opens. Default 10000 ms. */
  welcomeTimeoutMs?: number;
  /**
   * Default timeout for subscribe/budget/presence/connect promises. Default
   * 15000 ms. Publishes do not use it: they wait up to their idempotency
   * window (see `idempotencyWindowMs`) unless `PublishOptions.timeoutMs`
   * says less.
   */
  timeoutMs?: number;
  /**
   * Most unsettled publishes held by the client: queued, in flight, or
   * waiting for a reconnect to be sent again. Beyond it `publish()` rejects
   * `queue_full` at once. Default 1000.
   */
  maxQueue?: number;
  /**
   * Most bytes (the publish frames' JSON) of unsettled publishes; beyond it
   * `publish()` rejects `queue_full`. Default 4 MiB.
   */
  maxQueueBytes?: number;
  /**
   * How long the broker remembers a publish key (§17's
   * `idempotency_window_ms`, default 300000 ms). A publish is resent with
   * its key only while the window surely covers it: its deadline is this
   * less a margin (a tenth, at most 10 s), after which it rejects `timeout`.
   * When the `welcome` limits advertise a window, the shorter one is used.
   */
  idempotencyWindowMs?: number;
  /** How often a publish dropped by the server (`rate_limited`) is resent. Default 5. */
  maxRetries?: number;
  /** Fraction of the server's limits the local bucket uses. Default 0.9. */
  headroom?: number;
  /** Pace sends with the local bucket. Default true; turn off only to test the server. */
  pacing?: boolean;
  /**
   * The longest wait the SDK accepts from the server (`Retry-After`,
   * `retryAfterMs`): longer ones are cut to this, so a misconfigured or
   * hostile server cannot park the client for hours. Default 60000 ms.
   */
  maxRetryAfterMs?: number;
  /** Injected time source (tests). */
  clock?: Clock;
  /** Injected random source in [0, 1) (tests). */
  random?: () => number;
}

export interface PublishOptions {
  /**
   * The publish's idempotency key (§17): 1–64 bytes of `[A-Za-z0-9_.:-]`,
   * unique per channel within the window. Default: a random one. Pass
   * your own to make a retry of your own (after a reload, from another
   * process of the same account) a duplicate instead of a second message.
   */
  key?: string;
  /**
   * Rejects `timeout` when no answer came in this long (it cannot be longer
   * than the deadline the idempotency window allows, which is the default).
   */
  timeoutMs?: number;
}

export interface SubscribeOptions {
  /** Recover the messages after this `seq` (from the broker's bounded history). */
  since?: number;
  timeoutMs?: number;
  /**
   * Keep this channel's member set (§13; its namespace must have
   * presence): `client.subscription(channel).members`, `join`/`leave`.
   */
  presence?: boolean;
}

// ---------------------------------------------------------------- results --

export interface PublishResult {
  /** The one `seq` this publish got (the first one's, when the answer was a duplicate). */
  seq: number;
  /** How many times the publish was sent (1 when it was never dropped or cut off). */
  attempts: number;
  /** The idempotency key it carried (the caller's, or the generated one). */
  key: string;
  /**
   * Present (true) when the broker had already published this key: an
   * earlier send went out but its answer was lost. It was delivered once.
   */
  duplicate?: true;
}

export interface SubscribeResult {
  channel: string;
  /** Present when the subscribe carried `since`. */
  recovered?: boolean;
  /** The channel's position: live messages are above it (§11). */
  seq?: number;
}

export interface MessageContext {
  channel: string;
  seq: number;
  /**
   * On a conflating channel, this message replaced unsent ones with the
   * same key: the `seq` gap before it is expected, nothing was lost.
   */
  conflated: boolean;
}

export type MessageHandler = (data: Json, ctx: MessageContext) => void;

// ---------------------------------------------------------------- events ---

export type ClientState = "idle" | "connecting" | "connected" | "reconnecting" | "closed";

export interface CloseEvent {
  /** WebSocket close code (1006 when the connection dropped or was refused). */
  code: number;
  reason: string;
  /** Whether the socket had opened (false: the handshake failed). */
  wasOpen: boolean;
  refusal?: Refusal;
  /** The next attempt, or null when the client will not reconnect. */
  reconnect: { delayMs: number; attempt: number } | null;
}

export interface GapEvent {
  channel: string;
  /** The `since` the client asked from. */
  since: number;
  /** Where the subscription resumed: messages between are lost. */
  seq?: number;
}

export interface RateLimitedEvent {
  retryAfterMs: number;
  dropped: number;
  ids: Array<number | string>;
}

export interface QueueState {
  queued: number;
  inFlight: number;
  max: number;
}

export interface ClientEvents {
  state: { state: ClientState; previous: ClientState };
  /** The socket opened (the `welcome` frame is next). */
  open: { protocol: string };
  welcome: WelcomeFrame;
  close: CloseEvent;
  /** Errors not tied to one request (account_rate_limited, token errors, unsolicited errors). */
  error: TidegateError;
  /** Every budget frame, requested or unsolicited. */
  budget: BudgetFrame;
  rateLimited: RateLimitedEvent;
  /** The server dropped messages to this socket; the SDK recovers them with `since`. */
  slowConsumer: { dropped: number };
  /** History could not cover what a subscription missed: resynchronise. */
  gap: GapEvent;
  /** A message arrived (after de-duplication), for any channel. */
  message: MessageFrame;
  /** The token was replaced on the open socket (`refresh`, §2). */
  tokenRefresh: { tokenExpiresAt: number };
  /**
   * The broker extended the connection's expiry on its own (a refresh hook
   * answered, §15): `welcome.tokenExpiresAt` is now this.
   */
  expiry: { tokenExpiresAt: number };
  /** A member joined a channel subscribed with `presence: true` (§13). */
  join: MemberEvent;
  /** A member left such a channel (also ones missed while disconnected). */
  leave: MemberEvent;
  /** Counts of a busy presence channel, sent instead of diffs (§13). */
  presenceStats: PresenceStatsResult;
}

export type { AnyErrorCode };
