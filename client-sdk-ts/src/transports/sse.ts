/**
 * The SSE transport (PROTOCOL.md §14): for networks that block or cut
 * WebSockets. It looks like a socket to the client (typed frames in, typed
 * frames out: no socket JSON is written or read here) but speaks plain
 * HTTP, mapping each client frame to its request and each answer or event
 * to the server frame a socket would have sent:
 *
 * - the stream is `GET /v1/sse?channel=…` read with streaming `fetch`
 *   (the token in `Authorization`, which `EventSource` cannot send);
 * - `subscribe`/`unsubscribe` reopen the stream with the new set and
 *   `Last-Event-ID` set to the current position of every channel kept, so
 *   nothing is lost between the two streams: the broker's position is tied
 *   to the stream's list of channels, so the transport keeps each
 *   channel's `seq` from it and writes a position for the new list itself
 *   (`encodePosition`); the answer to a subscribe is
 *   the new stream's `recovered` event (with `since`) or the `id:` block
 *   where the channel went live (without);
 * - `publish` is `POST /v1/client/publish` with the frame's key as
 *   `Idempotency-Key` (§17), its `{"seq","duplicate"?}` or §5 error body
 *   read into an `ack`/`error` frame (so `rate_limited` is
 *   retried after `retryAfterMs` as on a socket). A channel's publishes
 *   are posted one after the other, so they keep the order they were made
 *   in (as one socket keeps it). A POST that fails without an answer (the
 *   network) ends the transport like a dropped socket: the client then
 *   sends that publish again, with its key, after the reconnect;
 * - `refresh` keeps the new token for the next requests and reopens the
 *   stream with it;
 * - anything else (presence reads, `budget`, `rpc`) has no HTTP form here
 *   and is answered with the SDK's `unsupported_transport` error;
 * - the stream's `welcome` is handed on as it came, and each `message`
 *   event's `data` (`{"channel","seq","data"}`, parsed once) as a
 *   `message` frame.
 */
import type {
  FetchLike,
  FetchResponseLike,
  Refusal,
  Transport,
  TransportFactory,
  TransportHandlers,
} from "../transport.js";
import type { AckFrame, ClientFrame, ErrorFrame, Json, MessageFrame, ServerFrame } from "../protocol.js";
import { tokenExpiryMs } from "../token.js";
import { parseObject } from "../wire.js";
import { parseRetryAfter } from "./websocket.js";
import {
  decodePosition,
  encodePosition,
  reconstructSeq,
  residueField,
  SseParser,
  type PositionEntry,
  type SseBlock,
} from "./sse-parser.js";

export type { FetchLike, FetchResponseLike };

interface AbortLike {
  readonly signal: unknown;
  abort(): void;
}

interface Globals {
  fetch?: FetchLike;
  AbortController?: new () => AbortLike;
  TextDecoder?: new () => { decode(b?: Uint8Array, o?: { stream: boolean }): string };
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const G = globalThis as unknown as Globals;
const MAX_ERROR_BODY = 4096;

/** The HTTP URLs next to a `ws(s)://…/v1/ws` URL. */
export function httpUrls(wsUrl: string): { sse: string; publish: string } {
  const m = /^(wss?|https?):\/\/([^/?#]+)([^?#]*)/i.exec(wsUrl);
  if (!m) throw new TypeError(`not a ws:// or wss:// URL: ${wsUrl}`);
  const scheme = m[1]!.toLowerCase() === "wss" || m[1]!.toLowerCase() === "https" ? "https" : "http";
  const path = m[3]!.replace(/\/v1\/ws\/?$/, "").replace(/\/$/, "");
  const base = `${scheme}://${m[2]}${path}`;
  return { sse: `${base}/v1/sse`, publish: `${base}/v1/client/publish` };
}

/** The SSE transport; `fetchImpl` defaults to the global `fetch`. */
export function sseTransport(fetchImpl?: FetchLike): TransportFactory {
  return (url, protocols, handlers) => {
    const doFetch = fetchImpl ?? G.fetch?.bind(globalThis);
    if (!doFetch || !G.AbortController || !G.TextDecoder) {
      throw new TypeError("the SSE transport needs fetch, AbortController and TextDecoder");
    }
    const bearer = protocols.find((p) => p.startsWith("bearer."));
    const stream = new SseStream(doFetch, httpUrls(url), bearer?.slice(7) ?? "", handlers);
    stream.connect();
    return stream;
  };
}

interface Pending {
  id: number;
  since?: number;
}

class SseStream implements Transport {
  /** The stream's channels, in the order subscribed (bounded by maxSubscriptions). */
  private readonly channels = new Set<string>();
  /**
   * The last position of each channel: its whole `seq` where a message
   * (or a `since`) said it, else the field of the stream's last `id:`,
   * verbatim (bounded by the stream's channels).
   */
  private position = new Map<string, PositionEntry>();
  /** Subscribes waiting for the stream that carries them (one per channel). */
  private readonly pending = new Map<string, Pending>();
  private opened = false;
  private done = false;
  private current?: AbortLike;
  private reopenTimer?: unknown;
  /**
   * Each channel's last publish POST, so the next waits for it. Bounded by
   * the channels with a publish in flight (the client's `maxQueue`): an
   * entry goes when its POST is the channel's last and it settles.
   */
  private readonly posting = new Map<string, Promise<void>>();

  constructor(
    private readonly fetch: FetchLike,
    private readonly urls: { sse: string; publish: string },
    private token: string,
    private readonly handlers: TransportHandlers,
  ) {}

  send(f: ClientFrame): void {
    if (this.done) throw new Error("the SSE stream is closed");
    switch (f.type) {
      case "subscribe": {
        this.channels.add(f.channel);
        this.pending.set(f.channel, { id: f.id, since: f.since });
        return this.reopenSoon();
      }
      case "unsubscribe":
        this.channels.delete(f.channel);
        this.pending.delete(f.channel);
        this.position.delete(f.channel);
        this.answer({ type: "ack", id: f.id });
        return this.reopenSoon();
      case "publish": {
        const { id, channel, data, key } = f;
        const before = this.posting.get(channel) ?? Promise.resolve();
        const mine: Promise<void> = before.then(() => this.publish(id, channel, data, key));
        this.posting.set(channel, mine);
        void mine.finally(() => {
          if (this.posting.get(channel) === mine) this.posting.delete(channel);
        });
        return;
      }
      case "refresh": {
        this.token = f.token;
        const ack: AckFrame = { type: "ack", id: f.id };
        const tokenExpiresAt = tokenExpiryMs(this.token);
        if (tokenExpiresAt !== undefined) ack.tokenExpiresAt = tokenExpiresAt;
        this.answer(ack);
        return this.reopenSoon();
      }
      default: {
        const error: ErrorFrame = {
          type: "error",
          id: f.id,
          code: "unsupported_transport",
          message: `"${f.type}" needs a WebSocket; this client is on the SSE stream (transport "sse", or "auto" after WebSocket failed)`,
        };
        if ("channel" in f && f.channel) error.channel = f.channel;
        this.answer(error);
      }
    }
  }

  close(): void {
    this.done = true;
    G.clearTimeout(this.reopenTimer);
    this.current?.abort();
    this.current = undefined;
  }

  /** Opens the stream with the current channels and position. */
  connect(): void {
    const ctrl = new G.AbortController!();
    this.current?.abort();
    this.current = ctrl;
    void this.run(ctrl).catch(() => {
      if (this.current === ctrl) this.fail(1006, "the SSE stream failed");
    });
  }

  private async run(ctrl: AbortLike): Promise<void> {
    // The stream's channels, in the order its position lists them.
    const list = [...this.channels];
    const query = list.map((c) => `channel=${encodeURIComponent(c)}`).join("&");
    const headers: Record<string, string> = { ...this.auth(), Accept: "text/event-stream" };
    // Kept channels resume where they are; new ones from their `since`
    // (a `recovered` event answers them) or live (an `id:` block does).
    const kept = new Map([...this.position].filter(([c]) => this.channels.has(c)));
    for (const [c, p] of this.pending) {
      if (p.since !== undefined) kept.set(c, p.since);
      else kept.delete(c);
    }
    if (kept.size > 0) headers["Last-Event-ID"] = encodePosition(list, kept);
    const batch = [...this.pending.keys()];
    const res = await this.fetch(`${this.urls.sse}${query ? `?${query}` : ""}`, {
      headers,
      signal: ctrl.signal,
    });
    if (this.current !== ctrl) return;
    if (res.status !== 200 || !res.body) return this.refused(res, batch);
    const reader = res.body.getReader();
    const decoder = new G.TextDecoder!();
    const parser = new SseParser();
    for (;;) {
      const { done, value } = await reader.read();
      if (this.current !== ctrl) {
        void reader.cancel().catch(() => undefined);
        return;
      }
      if (done) return this.fail(1006, "the SSE stream ended without a close event");
      for (const block of parser.push(decoder.decode(value, { stream: true }))) {
        this.onBlock(block, list);
        if (this.current !== ctrl) return;
      }
    }
  }

  /** One block of the stream opened with `list`. */
  private onBlock(b: SseBlock, list: readonly string[]): void {
    if (b.id !== undefined) this.moveTo(decodePosition(b.id, list));
    switch (b.event) {
      case "welcome": {
        if (this.opened) return; // a reopened stream: the client is already connected
        this.opened = true;
        this.handlers.open("sse");
        // §1's welcome frame, as the socket sends it (not an object: dropped,
        // and the client's welcome timer ends the attempt).
        const welcome = parseObject(b.data);
        if (welcome) this.handlers.message(welcome as ServerFrame);
        return;
      }
      case "message": {
        const m = messageFrame(parseObject(b.data));
        if (!m) return;
        this.learnSeq(m);
        return this.handlers.message(m);
      }
      case "recovered": {
        const r = (parseObject(b.data) ?? {}) as { channel?: unknown; recovered?: unknown };
        const p = typeof r.channel === "string" ? this.pending.get(r.channel) : undefined;
        if (!p) return; // a channel kept across a reopen
        this.pending.delete(r.channel as string);
        const ack: AckFrame = { type: "ack", id: p.id, recovered: r.recovered === true };
        if (p.since !== undefined) ack.seq = p.since;
        return this.handlers.message(ack);
      }
      case "close": {
        const c = (parseObject(b.data) ?? {}) as { code?: unknown; reason?: unknown };
        return this.fail(typeof c.code === "number" ? c.code : 1006, typeof c.reason === "string" ? c.reason : "");
      }
      case undefined:
        if (b.data !== undefined) return;
        // An `id:` alone: where live subscriptions started.
        for (const [channel, p] of this.pending) {
          const seq = this.seqOf(this.position.get(channel));
          if (p.since !== undefined || seq === undefined) continue;
          this.pending.delete(channel);
          this.handlers.message({ type: "ack", id: p.id, seq });
        }
        return;
      default:
        return;
    }
  }

  /**
   * Takes an `id:`'s entries, keeping a whole `seq` the SDK has where the
   * new field is that `seq`'s own (the channel did not move).
   */
  private moveTo(next: Map<string, PositionEntry> | undefined): void {
    if (!next) return;
    for (const [channel, entry] of next) {
      const had = this.position.get(channel);
      if (typeof entry === "string" && typeof had === "number" && residueField(had) === entry) {
        next.set(channel, had);
      }
    }
    this.position = next;
  }

  /** A message's whole `seq`, for its channel's position. */
  private learnSeq(m: MessageFrame): void {
    if (Number.isSafeInteger(m.seq) && m.seq >= 0 && this.position.has(m.channel)) {
      this.position.set(m.channel, m.seq);
    }
  }

  /**
   * The `seq` an entry stands for, to report in a live subscribe's ack. A
   * field is read against the latest of this client's clock and the
   * whole seqs it knows (seqs are the broker's clock in µs): a client
   * clock behind by more than 12.7 days, with no whole seq known, reads
   * an older `seq` (a later resume from it reports a gap, loses nothing).
   */
  private seqOf(entry: PositionEntry | undefined): number | undefined {
    if (typeof entry !== "string") return entry;
    let reference = Date.now() * 1000;
    for (const e of this.position.values()) {
      if (typeof e === "number" && e > reference) reference = e;
    }
    return reconstructSeq(entry, reference);
  }

  /**
   * A non-200 answer. Before the welcome it ends the transport (a refusal,
   * as for a WebSocket upgrade). On a reopen for new subscribes, a refusal
   * about the channels (400, 403 but `banned`) rejects those subscribes
   * and the stream reopens without them; anything else ends the transport.
   */
  private async refused(res: FetchResponseLike, batch: string[]): Promise<void> {
    const refusal = await readRefusal(res);
    if (this.done) return;
    const aboutChannels =
      (refusal.status === 400 || (refusal.status === 403 && refusal.code !== "banned")) &&
      this.opened;
    const rejected = batch.filter((c) => this.pending.has(c));
    if (!aboutChannels || rejected.length === 0) {
      return this.fail(1006, `the SSE request was refused (HTTP ${refusal.status})`, refusal);
    }
    for (const channel of rejected) {
      const p = this.pending.get(channel)!;
      this.pending.delete(channel);
      this.channels.delete(channel);
      this.position.delete(channel);
      this.handlers.message({
        type: "error",
        id: p.id,
        code: refusal.code ?? "bad_request",
        message: refusal.message ?? `the SSE stream was refused (HTTP ${refusal.status})`,
        channel,
      });
    }
    this.connect();
  }

  private async publish(id: number, channel: string, data: Json, key?: string): Promise<void> {
    if (this.done) return;
    let res: FetchResponseLike;
    let body: Record<string, unknown>;
    const headers: Record<string, string> = { ...this.auth(), "Content-Type": "application/json" };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    try {
      res = await this.fetch(this.urls.publish, {
        method: "POST",
        headers,
        body: JSON.stringify({ channel, data }),
      });
      body = parseObject((await res.text()).slice(0, MAX_ERROR_BODY * 4)) ?? {};
    } catch (cause) {
      // No answer: it may or may not have been published. The transport
      // ends as a dropped socket would; the client sends it again with its
      // key after the reconnect and gets the one seq.
      return this.fail(1006, `POST /v1/client/publish failed: ${String(cause)}`);
    }
    if (this.done) return;
    if (res.status === 200 && typeof body["seq"] === "number") {
      const ack: AckFrame = { type: "ack", id, seq: body["seq"] };
      if (body["duplicate"] === true) ack.duplicate = true;
      return this.answer(ack);
    }
    const header = parseRetryAfter(res.headers.get("retry-after") ?? undefined);
    const retryAfterMs = typeof body["retryAfterMs"] === "number" ? body["retryAfterMs"] : header;
    const error: ErrorFrame = {
      type: "error",
      id,
      code: typeof body["error"] === "string" ? body["error"] : "internal",
      message: typeof body["message"] === "string" ? body["message"] : `HTTP ${res.status}`,
      channel,
    };
    if (retryAfterMs !== undefined) error.retryAfterMs = retryAfterMs;
    this.answer(error);
  }

  /**
   * The token's header; none for a client without a token, whose requests
   * carry the page's cookies instead (same-origin `fetch`), for the
   * broker's connect hook to read (PROTOCOL.md §15).
   */
  private auth(): Record<string, string> {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** A subscribe or unsubscribe changed the set: reopen once for all of them. */
  private reopenSoon(): void {
    if (this.reopenTimer !== undefined || this.done) return;
    this.reopenTimer = G.setTimeout(() => {
      this.reopenTimer = undefined;
      if (!this.done) this.connect();
    }, 0);
  }

  /** A frame for the client, after the current call returns (as a socket's would). */
  private answer(frame: AckFrame | ErrorFrame): void {
    void Promise.resolve().then(() => {
      if (!this.done) this.handlers.message(frame);
    });
  }

  private fail(code: number, reason: string, refusal?: Refusal): void {
    if (this.done) return;
    this.close();
    this.handlers.close({ code, reason, wasOpen: this.opened, refusal });
  }
}

/**
 * A `message` event's data (`{"channel","seq","data"}`, plus `conflated`)
 * as the socket's `message` frame; undefined when it is not one (the
 * client would drop it).
 */
function messageFrame(data: Record<string, unknown> | undefined): MessageFrame | undefined {
  if (!data || typeof data["channel"] !== "string" || typeof data["seq"] !== "number") return undefined;
  return { ...data, type: "message" } as MessageFrame;
}

async function readRefusal(res: FetchResponseLike): Promise<Refusal & { message?: string }> {
  const refusal: Refusal & { message?: string } = {
    status: res.status,
    retryAfterMs: parseRetryAfter(res.headers.get("retry-after") ?? undefined),
  };
  const body = parseObject(await res.text().catch(() => "")) ?? {};
  if (typeof body["error"] === "string") refusal.code = body["error"];
  if (typeof body["message"] === "string") refusal.message = body["message"];
  if (typeof body["retryAfterMs"] === "number") {
    refusal.retryAfterMs = Math.max(refusal.retryAfterMs ?? 0, body["retryAfterMs"]);
  }
  return refusal;
}
