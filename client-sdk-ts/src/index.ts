/**
 * Tidegate client SDK.
 *
 * Layout:
 * - `client.ts`        TidegateClient: the public API
 * - `connection.ts`    lifecycle: token, handshake, welcome, close policy, reconnect
 * - `frames.ts`        server frames → requests, subscriptions, events
 * - `pacer.ts`         local queue drained through buckets mirroring `welcome` limits
 * - `publishes.ts`     bounds and deadline of unsettled publishes (resent after a reconnect)
 * - `keys.ts`          idempotency keys: generated, or the caller's checked (§17)
 * - `reconnect.ts`     close code / refusal → delay (full jitter over a floor)
 * - `refresh.ts`       when to send a fresh token on the socket (`refresh`)
 * - `backoff.ts`       backoff(step, min, max) with full jitter
 * - `presence.ts`      presence reads and member sets kept from diffs (§13)
 * - `rpc.ts`           calls to the backend's `rpc` hook over the socket (§15)
 * - `server-channels.ts` the `welcome`'s server-side subscriptions (§15)
 * - `codes.ts`         error and close codes (mirrors broker/src/protocol/codes.rs)
 * - `host.ts`          what `frames.ts` and `in-flight.ts` use of a connection
 * - `transport.ts`     what a transport is (typed frames both ways), and what a
 *                      runtime hands one
 * - `wire.ts`          frames as JSON text on a WebSocket: encode, decode, byte length
 * - `types.ts`         options, results and the typed event map
 * - `protocol.ts`      the wire frames, both ways, as types (re-exported by `types.ts`)
 * - `transports/`      one file per transport (WebSocket: browser and `ws`; SSE:
 *                      `fetch` streaming) and `auto.ts`, which picks one
 */
export { TidegateClient, SUBPROTOCOL } from "./client.js";
export { TidegateError, type TidegateErrorDetails } from "./errors.js";
export { backoff, backoffCeiling } from "./backoff.js";
export { TokenBucket } from "./bucket.js";
export { realClock, type Clock, type TimerHandle } from "./clock.js";
export {
  MAX_RETRY_AFTER_MS,
  planReconnect,
  type ReconnectDecision,
  type ReconnectInput,
  type ReconnectSettings,
} from "./reconnect.js";
export { refreshDelay } from "./refresh.js";
export { generateKey, validKey } from "./keys.js";
export {
  DEFAULT_IDEMPOTENCY_WINDOW_MS,
  DEFAULT_MAX_QUEUE,
  DEFAULT_MAX_QUEUE_BYTES,
  publishDeadlineMs,
} from "./publishes.js";
export { webSocketTransport, parseRetryAfter, type WebSocketLike } from "./transports/websocket.js";
export { sseTransport, type FetchLike, type FetchResponseLike } from "./transports/sse.js";
export { nextTransport, type TransportKind, type TransportMode } from "./transports/auto.js";
export { SseParser, type SseBlock } from "./transports/sse-parser.js";
export type { Transport, TransportClose, TransportFactory, TransportHandlers } from "./transport.js";
export type { BucketView } from "./pacer.js";
export * from "./codes.js";
export type * from "./types.js";
export { MAX_RPC_METHOD_BYTES, type RpcOptions, type RpcReplyFrame } from "./rpc.js";
export type {
  ChannelSubscription,
  Member,
  MemberEvent,
  PresenceCounts,
  PresenceResult,
  PresenceStatsResult,
  PresenceSubscription,
} from "./presence.js";
