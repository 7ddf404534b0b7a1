import WebSocket from "ws";
import type { WebSocketLike } from "../../src/transports/websocket.js";

/**
 * `ws` with only the browser's surface: no `on`, no `terminate`, so a
 * refused upgrade is just close 1006 without open, as in a browser.
 */
export class BrowserLikeWebSocket implements WebSocketLike {
  private readonly inner: WebSocket;

  constructor(url: string, protocols: string[]) {
    this.inner = new WebSocket(url, protocols);
  }

  get protocol(): string {
    return this.inner.protocol;
  }
  get readyState(): number {
    return this.inner.readyState;
  }
  set onopen(fn: WebSocketLike["onopen"]) {
    this.inner.onopen = fn as never;
  }
  get onopen() {
    return this.inner.onopen as never;
  }
  set onmessage(fn: WebSocketLike["onmessage"]) {
    this.inner.onmessage = fn as never;
  }
  get onmessage() {
    return this.inner.onmessage as never;
  }
  set onclose(fn: WebSocketLike["onclose"]) {
    this.inner.onclose = fn as never;
  }
  get onclose() {
    return this.inner.onclose as never;
  }
  set onerror(fn: WebSocketLike["onerror"]) {
    this.inner.onerror = fn as never;
  }
  get onerror() {
    return this.inner.onerror as never;
  }
  send(data: string): void {
    this.inner.send(data);
  }
  close(code?: number, reason?: string): void {
    this.inner.close(code, reason);
  }
}
