/**
 * The client's view of a connection, so the client logic does not depend on
 * one socket API: typed frames both ways (`ClientFrame` out, `ServerFrame`
 * in, both in `protocol.ts`), whatever carries them. `transports/websocket.ts`
 * is the implementation for the browser's WebSocket and for `ws` in Node
 * (the only one that writes and reads JSON text, with `wire.ts`);
 * `transports/sse.ts` maps each frame to an HTTP request and each answer
 * or event to a frame.
 *
 * It also holds what a runtime hands a transport (a WebSocket constructor,
 * `fetch`) and what a transport reports of a refused handshake: the lowest
 * module of the client but for `codes.ts` and `protocol.ts`, which
 * `types.ts` and `transports/` both import.
 */
import type { ErrorCode } from "./codes.js";
import type { ClientFrame, ServerFrame } from "./protocol.js";

export interface TransportClose {
  code: number;
  reason: string;
  /** Whether `open` had fired before the close. */
  wasOpen: boolean;
  /** The HTTP refusal of the upgrade, when the runtime exposes it. */
  refusal?: Refusal;
}

export interface TransportHandlers {
  open(protocol: string): void;
  /** One server frame, decoded (the client reads it by its `type`). */
  message(frame: ServerFrame): void;
  /** Called exactly once, unless the client closed the transport itself. */
  close(info: TransportClose): void;
}

export interface Transport {
  /**
   * Sends one client frame (it always has an `id`: its answer names it).
   * May throw when it cannot take it (closed): the client then rejects that
   * request `disconnected`.
   */
  send(frame: ClientFrame): void;
  /** Closes without reporting back: the client already knows. */
  close(code?: number, reason?: string): void;
}

export type TransportFactory = (
  url: string,
  protocols: string[],
  handlers: TransportHandlers,
) => Transport;

// ------------------------------------- what a runtime hands a transport ---

/** A handshake refused before the upgrade, when the runtime can read it (Node + ws). */
export interface Refusal {
  status: number;
  code?: ErrorCode | string;
  /** The body's `message` (a backend hook's own words for its refusal, §15). */
  message?: string;
  retryAfterMs?: number;
}

/**
 * The constructor of a WHATWG-style WebSocket: the browser's, or `ws` in
 * Node. Typed loosely so both are accepted as they are; the SDK uses only
 * what `WebSocketLike` lists.
 */
export type WebSocketConstructor = new (url: string, protocols: string[]) => object;

/** What the SDK needs of a WebSocket object (browser or `ws`). */
export interface WebSocketLike {
  readonly protocol: string;
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** What the SSE transport needs of `fetch` (the global one by default). */
export type FetchLike = (
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string; signal?: unknown },
) => Promise<FetchResponseLike>;

export interface FetchResponseLike {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  readonly body: { getReader(): StreamReaderLike } | null;
  text(): Promise<string>;
}

interface StreamReaderLike {
  read(): Promise<{ done: boolean; value?: Uint8Array }>;
  cancel(): Promise<void>;
}
