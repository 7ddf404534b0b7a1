/**
 * Which transport the next connection attempt uses (`transport` in
 * ClientOptions, PROTOCOL.md §14):
 *
 * - `"websocket"`: always the WebSocket;
 * - `"sse"`: always the SSE stream (`transports/sse.ts`);
 * - `"auto"` (the default): the WebSocket first; the SSE stream when an
 *   attempt ended before `welcome` without the broker's own refusal (a
 *   proxy that refuses or cuts upgrades looks like that; the broker's
 *   refusals carry a JSON code and mean the same over either transport).
 *   A transport that reached `welcome` is kept, and a client whose
 *   WebSocket has reached `welcome` once never falls back (the network
 *   lets WebSockets through: a later failure is an outage, and the
 *   WebSocket is the transport that has presence); when the SSE stream fails
 *   before `welcome` too (the network is down), the next attempt tries the
 *   WebSocket again. Every switch goes through the usual reconnect, so the
 *   backoff and jitter are the same;
 * - a function: a custom transport.
 */
import type { FetchLike, TransportClose, TransportFactory, WebSocketConstructor } from "../transport.js";
import { sseTransport } from "./sse.js";
import { webSocketTransport } from "./websocket.js";

export type TransportMode = "auto" | "websocket" | "sse";
export type TransportKind = "websocket" | "sse" | "custom";

/**
 * The transport of the next attempt, after `info` ended one on `current`
 * (`welcomed`: it had reached `welcome`; `wsWorked`: a WebSocket of this
 * client reached `welcome` before).
 */
export function nextTransport(
  mode: TransportMode,
  current: "websocket" | "sse",
  info: TransportClose,
  welcomed: boolean,
  wsWorked = false,
): "websocket" | "sse" {
  if (mode !== "auto" || welcomed) return current;
  if (wsWorked) return "websocket";
  if (info.refusal?.code !== undefined) return current; // the broker said no: the same on both
  return current === "websocket" ? "sse" : "websocket";
}

export class TransportChooser {
  private kind: TransportKind;
  private readonly mode: TransportMode;
  private ws?: TransportFactory;
  private sse?: TransportFactory;
  private readonly custom?: TransportFactory;
  private readonly hasWebSocket: boolean;
  /** A WebSocket of this client reached `welcome`: it never falls back. */
  private wsWorked = false;

  constructor(
    transport: TransportMode | TransportFactory | undefined,
    private readonly WebSocket: WebSocketConstructor | undefined,
    private readonly fetch: FetchLike | undefined,
  ) {
    this.hasWebSocket = resolveWebSocket(WebSocket, false) !== undefined;
    if (typeof transport === "function") {
      this.custom = transport;
      this.mode = "websocket";
      this.kind = "custom";
      return;
    }
    this.mode = transport ?? "auto";
    if (!["auto", "websocket", "sse"].includes(this.mode)) {
      throw new TypeError(`transport must be "auto", "websocket", "sse" or a function, not ${String(transport)}`);
    }
    this.kind = this.mode === "sse" ? "sse" : "websocket";
    if (this.mode === "websocket") resolveWebSocket(WebSocket, true);
    if (!this.hasWebSocket) this.kind = "sse"; // auto without any WebSocket implementation
  }

  /** The transport the next attempt uses. */
  get current(): TransportKind {
    return this.kind;
  }

  factory(): TransportFactory {
    if (this.custom) return this.custom;
    if (this.kind === "sse") return (this.sse ??= sseTransport(this.fetch));
    return (this.ws ??= webSocketTransport(resolveWebSocket(this.WebSocket, true)!));
  }

  /** An attempt ended; returns whether the next one uses the other transport. */
  closed(info: TransportClose, welcomed: boolean): boolean {
    if (this.kind === "custom") return false;
    if (this.kind === "websocket" && welcomed) this.wsWorked = true;
    const next = this.hasWebSocket
      ? nextTransport(this.mode, this.kind, info, welcomed, this.wsWorked)
      : "sse";
    const switched = next !== this.kind;
    this.kind = next;
    return switched;
  }
}

function resolveWebSocket(
  ctor: WebSocketConstructor | undefined,
  required: boolean,
): WebSocketConstructor | undefined {
  const found = ctor ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!found && required) {
    throw new TypeError(
      "no WebSocket implementation: in Node pass { WebSocket } from the `ws` package",
    );
  }
  return found;
}
