/**
 * WebSocket transport: the browser's `WebSocket`, or `ws` in Node. It is
 * the one transport that speaks JSON text: each frame the client sends is
 * written as its JSON (`wire.ts`), and each text frame received is decoded
 * before the client sees it; a text that is not a JSON object is dropped
 * (not ours to answer), binary frames too.
 *
 * Browsers cannot see why an upgrade was refused (they get close 1006
 * without `open`). `ws` emits `unexpected-response` with the HTTP status,
 * `Retry-After` and the JSON body; when the socket has that event we read it
 * and report a `Refusal`, so 401s fetch a new token and 429/503s wait at
 * least `Retry-After`.
 */
import type {
  Refusal,
  Transport,
  TransportFactory,
  TransportHandlers,
  WebSocketConstructor,
  WebSocketLike,
} from "../transport.js";
import { decodeFrame, encodeFrame } from "../wire.js";

export type { WebSocketLike };

/** The extra surface of the `ws` package, detected at run time. */
interface NodeWsExtras {
  on(event: "unexpected-response", fn: (req: unknown, res: HttpResponseLike) => void): unknown;
  terminate(): void;
}

interface HttpResponseLike {
  statusCode?: number;
  headers: Record<string, string | string[] | undefined>;
  on(event: "data", fn: (chunk: { toString(): string }) => void): unknown;
  on(event: "end" | "error" | "close", fn: () => void): unknown;
}

const MAX_REFUSAL_BODY = 4096;

/** Parses `Retry-After` (delta-seconds or an HTTP date) into ms. */
export function parseRetryAfter(value: string | undefined, nowMs = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - nowMs);
}

function hasNodeExtras(ws: WebSocketLike): ws is WebSocketLike & NodeWsExtras {
  const candidate = ws as unknown as Partial<NodeWsExtras>;
  return typeof candidate.on === "function" && typeof candidate.terminate === "function";
}

export function webSocketTransport(Ctor: WebSocketConstructor): TransportFactory {
  return (url: string, protocols: string[], handlers: TransportHandlers): Transport => {
    let wasOpen = false;
    let done = false;
    let refusal: Refusal | undefined;
    const ws = new Ctor(url, protocols) as WebSocketLike;

    const finish = (code: number, reason: string) => {
      if (done) return;
      done = true;
      handlers.close({ code, reason, wasOpen, refusal });
    };

    ws.onopen = () => {
      if (done) return;
      wasOpen = true;
      handlers.open(ws.protocol);
    };
    ws.onmessage = (ev) => {
      if (done) return;
      // Binary frames are not part of the contract; ignore them.
      if (typeof ev.data !== "string") return;
      const frame = decodeFrame(ev.data);
      if (frame) handlers.message(frame);
    };
    ws.onerror = () => {
      // A close event always follows; it carries what we can know.
    };
    ws.onclose = (ev) => finish(ev.code, ev.reason);

    if (hasNodeExtras(ws)) {
      ws.on("unexpected-response", (_req, res) => {
        const header = res.headers["retry-after"];
        const status = res.statusCode ?? 0;
        refusal = {
          status,
          retryAfterMs: parseRetryAfter(Array.isArray(header) ? header[0] : header),
        };
        let body = "";
        let settled = false;
        const settle = () => {
          if (settled) return;
          settled = true;
          try {
            const parsed = JSON.parse(body) as { error?: unknown; message?: unknown; retryAfterMs?: unknown };
            if (refusal && typeof parsed.error === "string") refusal.code = parsed.error;
            if (refusal && typeof parsed.message === "string") refusal.message = parsed.message;
            if (refusal && typeof parsed.retryAfterMs === "number") {
              refusal.retryAfterMs = Math.max(refusal.retryAfterMs ?? 0, parsed.retryAfterMs);
            }
          } catch {
            // Not JSON: the status and header are all we have.
          }
          ws.terminate();
        };
        res.on("data", (chunk) => {
          if (body.length < MAX_REFUSAL_BODY) body += chunk.toString();
        });
        res.on("end", settle);
        res.on("error", settle);
        res.on("close", settle);
      });
    }

    return {
      send: (frame) => ws.send(encodeFrame(frame)),
      close: (code = 1000, reason = "") => {
        done = true;
        ws.onopen = ws.onmessage = ws.onclose = null;
        ws.onerror = () => undefined;
        try {
          if (hasNodeExtras(ws) && ws.readyState === 0) ws.terminate();
          else ws.close(code, reason);
        } catch {
          // Already closing.
        }
      },
    };
  };
}
