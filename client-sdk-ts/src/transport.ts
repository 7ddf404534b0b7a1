/**
 * The client's view of a connection, so the client logic does not depend on
 * one socket API. `transports/websocket.ts` is the implementation for the
 * browser's WebSocket and for `ws` in Node.
 */
import type { Refusal } from "./types.js";

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
  message(text: string): void;
  /** Called exactly once, unless the client closed the transport itself. */
  close(info: TransportClose): void;
}

export interface Transport {
  send(text: string): void;
  /** Closes without reporting back: the client already knows. */
  close(code?: number, reason?: string): void;
}

export type TransportFactory = (
  url: string,
  protocols: string[],
  handlers: TransportHandlers,
) => Transport;
