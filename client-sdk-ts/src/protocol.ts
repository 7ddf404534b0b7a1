/**
 * The wire frames (PROTOCOL.md §2–3) as types, both ways: what the client
 * hands a transport (`ClientFrame`) and what a transport hands the client
 * (`ServerFrame`). Types only, importing only the code table, so
 * `transport.ts` (which `types.ts` imports) can name them without a circle;
 * `types.ts` re-exports them.
 */
import type { ErrorCode } from "./codes.js";

/** Any JSON value a message may carry. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ---------------------------------------------------------------- frames ---

/** Limits in force for this connection, from the `welcome` frame. */
export interface Limits {
  messagesPerSec: number;
  burst: number;
  maxPayloadBytes: number;
  maxSubscriptions: number;
  accountMessagesPerSec: number;
  accountBurst: number;
  maxConnections: number;
  /**
   * How long the broker remembers a publish's key (§17), when it says; the
   * SDK keeps each publish's deadline inside it.
   */
  idempotencyWindowMs?: number;
}

export interface WelcomeFrame {
  type: "welcome";
  connId: string;
  account: string;
  node: string;
  limits: Limits;
  /**
   * The token's `exp` in unix ms (§2): the SDK refreshes before it. For a
   * connection a connect hook accepted (no token), the hook's `expiresAt`;
   * the broker extends it with `expiry` frames (§15).
   */
  tokenExpiresAt?: number;
  /**
   * Server-side subscriptions (§15: a connect hook's `channels`), joined
   * by the broker at the handshake, each with the channel's position as a
   * subscribe ack carries it. The SDK keeps them as subscriptions
   * (`client.subscription(channel)`).
   */
  channels?: Array<ServerChannel | string>;
}

/** One entry of `welcome.channels`. */
export interface ServerChannel {
  channel: string;
  seq?: number;
}

/** The broker extended a hook-given expiry (§15's `refresh` event). */
export interface ExpiryFrame {
  type: "expiry";
  tokenExpiresAt: number;
}

export interface AckFrame {
  type: "ack";
  id: number | string;
  seq?: number;
  recovered?: boolean;
  /** A publish whose key the broker had already published: `seq` is the first one's (§17). */
  duplicate?: boolean;
  /** The answer to a `refresh`: the new token's `exp` in unix ms. */
  tokenExpiresAt?: number;
}

export interface MessageFrame {
  type: "message";
  channel: string;
  seq: number;
  data: Json;
  /** On a conflating channel: this message replaced unsent ones (§11). */
  conflated?: boolean;
}

export interface ErrorFrame {
  type: "error";
  code: ErrorCode | string;
  message?: string;
  id?: number | string;
  ids?: Array<number | string>;
  retryAfterMs?: number;
  dropped?: number;
  /** The channel an error is about (`forbidden`, `too_many_subscriptions`). */
  channel?: string;
}

export interface BucketState {
  remaining: number;
  capacity: number;
  refillPerSec: number;
}

export interface BudgetFrame {
  type: "budget";
  id?: number | string;
  connection?: BucketState;
  account?: BucketState;
}

/**
 * A frame `frames.ts` reads by its `type` alone: an `rpc` reply
 * (`RpcReplyFrame`), presence's (§13), or a newer server's (ignored).
 */
export interface OtherServerFrame {
  type: string;
  [field: string]: unknown;
}

/**
 * A server frame, decoded: what a transport hands the client. The
 * WebSocket transport hands on every JSON object a text frame holds
 * (a text that is not one is dropped there); the SSE transport builds
 * these from its HTTP answers and events.
 */
export type ServerFrame =
  | WelcomeFrame
  | AckFrame
  | MessageFrame
  | ErrorFrame
  | BudgetFrame
  | ExpiryFrame
  | OtherServerFrame;

// --------------------------------------------------------- client frames ---

/** `{"type":"subscribe"}` (§2); `since` recovers the messages after it. */
export interface SubscribeFrame {
  type: "subscribe";
  channel: string;
  since?: number;
  id: number;
}

export interface UnsubscribeFrame {
  type: "unsubscribe";
  channel: string;
  id: number;
}

/** A publish with its idempotency key (§17). */
export interface PublishFrame {
  type: "publish";
  channel: string;
  data: Json;
  key?: string;
  id: number;
}

/** Asks for a `budget` frame naming `id`. */
export interface BudgetRequestFrame {
  type: "budget";
  id: number;
}

/** Replaces the connection's token (§2). */
export interface RefreshFrame {
  type: "refresh";
  token: string;
  id: number;
}

/** A presence read (§13). */
export interface PresenceRequestFrame {
  type: "presence";
  channel: string;
  limit: number;
  id: number;
}

export interface PresenceStatsRequestFrame {
  type: "presence_stats";
  channel: string;
  id: number;
}

/** A call to the backend's `rpc` hook (§15). */
export interface RpcCallFrame {
  type: "rpc";
  method: string;
  data: Json;
  id: number;
}

/**
 * A client frame (§2), as the client hands it to a transport: the
 * WebSocket transport sends its JSON, the SSE transport the HTTP request
 * it maps to.
 */
export type ClientFrame =
  | SubscribeFrame
  | UnsubscribeFrame
  | PublishFrame
  | BudgetRequestFrame
  | RefreshFrame
  | PresenceRequestFrame
  | PresenceStatsRequestFrame
  | RpcCallFrame;
