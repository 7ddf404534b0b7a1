/**
 * The Tidegate client's public API: connect, publish, subscribe,
 * unsubscribe, requestBudget, close. The connection lifecycle it builds on
 * is in `connection.ts`.
 */
import type { Request, UnsentFrame } from "./request.js";
import type { Subscription } from "./subscriptions.js";
import { frameBytes } from "./wire.js";
import { generateKey, validKey } from "./keys.js";
import { publishDeadlineMs } from "./publishes.js";
import type {
  AckFrame,
  BudgetFrame,
  ClientOptions,
  Json,
  MessageHandler,
  PublishOptions,
  PublishResult,
  SubscribeOptions,
  SubscribeResult,
  WelcomeFrame,
} from "./types.js";
import { Connection, type Waiter } from "./connection.js";
import { TidegateError, closedError, tooLarge } from "./errors.js";
import { rpcFrame, rpcResult, type RpcOptions, type RpcReplyFrame } from "./rpc.js";
import {
  PresenceTracker,
  type PresenceDiffFrame,
  type PresenceResult,
  type PresenceStatsResult,
  type ChannelSubscription,
} from "./presence.js";

export { SUBPROTOCOL } from "./connection.js";

export class TidegateClient extends Connection {
  /** @internal Member sets of `presence: true` subscriptions. */
  readonly presenceSets: PresenceTracker;

  constructor(options: ClientOptions) {
    super(options);
    this.presenceSets = new PresenceTracker({
      readPresence: (channel, limit) => this.presence(channel, { limit }),
      readPresenceStats: (channel) => this.presenceStats(channel),
      firePresence: (event, e) => this.fire(event, e),
      firePresenceStats: (e) => this.fire("presenceStats", e),
      firePresenceError: (e) => {
        if (e.code !== "closed" && e.code !== "disconnected") this.fire("error", e);
      },
    });
  }

  // ------------------------------------------------------------ presence --

  /** Who is in `channel` (§13): at most `limit` (default 100, max 1000) members. */
  presence(channel: string, options: { limit?: number; timeoutMs?: number } = {}): Promise<PresenceResult> {
    const frame = { type: "presence" as const, channel, limit: options.limit ?? 100 };
    return this.read<PresenceResult>("presence", frame, channel, options.timeoutMs);
  }

  /** How many users and connections `channel` has (§13). */
  presenceStats(channel: string, options: { timeoutMs?: number } = {}): Promise<PresenceStatsResult> {
    const frame = { type: "presence_stats" as const, channel };
    return this.read<PresenceStatsResult>("presence_stats", frame, channel, options.timeoutMs);
  }

  /**
   * A subscription: one made by `subscribe()`, or one the broker joined at
   * the handshake (a connect hook's `channels`, §15: `server: true`). Its
   * `members` are kept for `presence: true` subscriptions (empty otherwise).
   */
  subscription(channel: string): ChannelSubscription | undefined {
    const sub = this.subs.get(channel);
    const tracked = this.presenceSets.get(channel);
    if (!sub && !tracked) return undefined;
    const subs = this.subs;
    return {
      channel,
      get seq() {
        return subs.get(channel)?.lastSeq;
      },
      get server() {
        return subs.get(channel)?.server === true;
      },
      get live() {
        return subs.get(channel)?.live === true;
      },
      members: tracked?.members ?? new Map(),
      presence: (options = {}) => this.presence(channel, options),
      presenceStats: () => this.presenceStats(channel),
    };
  }

  // ----------------------------------------------------------------- rpc --

  /**
   * Calls `method` on the application's backend through the broker (§15's
   * `rpc` hook): resolves with the backend's reply data. Rejects with the
   * backend's own code (a `TidegateError` with its `message` and
   * `retryAfterMs`), `hook_unavailable` (temporary: the backend did not
   * answer), a limiter's refusal, `timeout`, or `disconnected`. An RPC is
   * not idempotent: one in flight when the socket closes rejects
   * `disconnected` and is never sent again by the SDK (the backend may have
   * run it). Needs the WebSocket (over SSE: `unsupported_transport`).
   */
  rpc<T extends Json = Json>(method: string, data?: Json, options: RpcOptions = {}): Promise<T> {
    const frame = rpcFrame(method, data);
    if (frame instanceof TidegateError) return Promise.reject(frame);
    return this.read<RpcReplyFrame>("rpc", frame, undefined, options.timeoutMs).then(
      (reply) => rpcResult(reply) as T,
    );
  }

  /** @internal */
  onPresenceFrame(frame: { type: string; channel: string }): void {
    if (typeof frame.channel !== "string") return;
    if (frame.type === "presence_diff") this.presenceSets.diff(frame as unknown as PresenceDiffFrame);
    else if (frame.type === "presence_stats") this.presenceSets.stats(frame as unknown as PresenceStatsResult);
  }

  private read<T>(
    kind: "presence" | "presence_stats" | "rpc",
    frame: UnsentFrame,
    channel: string | undefined,
    timeoutMs?: number,
  ): Promise<T> {
    if (this._state === "closed") return Promise.reject(closedError());
    if (this._state !== "connected") {
      return Promise.reject(new TidegateError("disconnected", "not connected"));
    }
    return new Promise<T>((resolve, reject) => {
      this.pacer.enqueue(this.makeRequest(kind, frame, channel, timeoutMs, resolve, reject));
    });
  }

  // ----------------------------------------------------------- lifecycle --

  /**
   * Starts connecting (if idle) and resolves on the next `welcome`. Rejects
   * after `timeoutMs` (the client keeps trying), on `close()`, or when the
   * token is refused and cannot be renewed.
   */
  connect(options: { timeoutMs?: number } = {}): Promise<WelcomeFrame> {
    if (this._state === "closed") return Promise.reject(closedError());
    if (this._state === "connected" && this._welcome) return Promise.resolve(this._welcome);
    const p = new Promise<WelcomeFrame>((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        timer: this.clock.setTimeout(() => {
          this.waiters = this.waiters.filter((x) => x !== w);
          reject(new TidegateError("timeout", "not connected within the timeout"));
        }, options.timeoutMs ?? this.timeoutMs),
      };
      this.waiters.push(w);
    });
    if (this._state === "idle") void this.startAttempt();
    return p;
  }

  /** Closes for good: every pending promise rejects with `closed`. */
  close(): void {
    if (this._state === "closed") return;
    this.shutdown(closedError());
  }

  // ---------------------------------------------------------- operations --

  /**
   * Publishes once (PROTOCOL.md §17): resolves with the one `seq` the
   * broker gave it. The frame carries `options.key` or a generated key; a
   * publish whose answer was lost to a disconnect is sent again with that
   * key after the reconnect (in its channel's order, over the SSE fallback
   * too), and the broker answers a repeat with the first `seq`. It rejects
   * only on a refusal that retrying cannot help (`forbidden`, `bad_request`,
   * `payload_too_large`, `cost_exceeds_max`, …), on `queue_full`, on
   * `close()`, or with `timeout` when its deadline (the idempotency window
   * less a margin, or `options.timeoutMs`) passes; the error's `key` lets
   * the app ask again within the window.
   */
  publish(channel: string, data: Json, options: PublishOptions = {}): Promise<PublishResult> {
    if (this._state === "closed") return Promise.reject(closedError());
    if (options.key !== undefined && !validKey(options.key)) {
      return Promise.reject(
        new TidegateError("bad_request", "a publish key is 1–64 bytes of [A-Za-z0-9_.:-]", { channel }),
      );
    }
    const key = options.key ?? generateKey();
    const frame = { type: "publish" as const, channel, data, key };
    const bytes = frameBytes({ ...frame, id: this.nextId });
    const max = this._welcome?.limits.maxPayloadBytes;
    if (max && bytes > max) return Promise.reject(tooLarge(channel, max));
    const full = this.unsettled.admit(bytes);
    if (full) return Promise.reject(new TidegateError("queue_full", full, { channel, key }));
    return new Promise<PublishResult>((resolve, reject) => {
      const req = this.makeRequest<PublishResult>(
        "publish",
        frame,
        channel,
        publishDeadlineMs(this.idempotencyWindowMs(), options.timeoutMs),
        (result) => {
          this.unsettled.release(bytes);
          resolve(result);
        },
        (error) => {
          this.unsettled.release(bytes);
          reject(error);
        },
      );
      this.pacer.enqueue(req);
    });
  }

  /**
   * Subscribes `handler` to `channel`; resolves on the server's ack. A second
   * call for the same channel adds the handler and shares the first call's
   * promise. `since` recovers the messages after that seq.
   */
  subscribe(
    channel: string,
    handler: MessageHandler,
    options: SubscribeOptions = {},
  ): Promise<SubscribeResult> {
    if (this._state === "closed") return Promise.reject(closedError());
    const existing = this.subs.get(channel);
    if (options.presence) this.presenceSets.track(channel);
    if (existing) {
      existing.handlers.add(handler);
      return existing.ready;
    }
    let resolveReady!: (r: SubscribeResult) => void;
    let rejectReady!: (e: TidegateError) => void;
    const ready = new Promise<SubscribeResult>((res, rej) => {
      resolveReady = res;
      rejectReady = rej;
    });
    const sub: Subscription = {
      channel,
      handlers: new Set([handler]),
      lastSeq: options.since,
      ready,
      live: false,
    };
    // Marked handled so a fire-and-forget subscribe cannot crash Node with an
    // unhandled rejection; failures are also emitted as `error` events.
    ready.catch(() => undefined);
    this.subs.add(sub);
    const req = this.subscribeRequest(sub, false, options.timeoutMs, resolveReady, (err) => {
      if (err.code !== "closed") this.emit("error", err);
      rejectReady(err);
    });
    if (this._state === "connected") this.pacer.enqueue(req);
    return ready;
  }

  /**
   * Removes `handler` (or every handler) from `channel`; when none is left,
   * unsubscribes on the server. Resolves on the ack, or at once when the
   * server has nothing to forget.
   */
  unsubscribe(channel: string, handler?: MessageHandler): Promise<void> {
    const sub = this.subs.get(channel);
    if (!sub) return Promise.resolve();
    if (handler) {
      sub.handlers.delete(handler);
      if (sub.handlers.size > 0) return Promise.resolve();
    }
    this.clock.clearTimeout(sub.retry);
    this.subs.delete(channel);
    this.presenceSets.forget(channel);
    const unacked = new TidegateError("closed", "unsubscribed before the ack", { channel });
    const serverKnows = this.abandon(sub.request, unacked) || sub.live;
    if (this._state !== "connected" || !serverKnows) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const frame = { type: "unsubscribe" as const, channel };
      const req = this.makeRequest("unsubscribe", frame, channel, undefined, resolve, reject);
      this.pacer.enqueue(req);
    });
  }

  /** Asks the server for the current budget (costs no units, not paced; the server answers at most `free_frame_burst` at once and `free_frames_per_sec` after, and refuses the rest with `rate_limited`). */
  requestBudget(options: { timeoutMs?: number } = {}): Promise<BudgetFrame> {
    if (this._state === "closed") return Promise.reject(closedError());
    if (this._state !== "connected") {
      return Promise.reject(new TidegateError("disconnected", "not connected"));
    }
    return new Promise<BudgetFrame>((resolve, reject) => {
      const frame = { type: "budget" as const };
      const req = this.makeRequest("budget", frame, undefined, options.timeoutMs, resolve, reject);
      this.sendRequest(req);
    });
  }

  /**
   * @internal The server ended a subscription (a refreshed token no longer
   * allows it): forget it, rejecting a subscribe still on its way.
   */
  forget(channel: string): void {
    const sub = this.subs.get(channel);
    if (!sub) return;
    this.clock.clearTimeout(sub.retry);
    this.subs.delete(channel);
    this.presenceSets.forget(channel);
    this.abandon(
      sub.request,
      new TidegateError("forbidden", "the refreshed token does not allow this channel", { channel }),
    );
  }

  /** A `refresh` frame with `token`: resolves with the ack's `tokenExpiresAt`. */
  protected sendRefresh(token: string): Promise<number | undefined> {
    return new Promise((resolve, reject) => {
      const req = this.makeRequest<AckFrame>(
        "refresh",
        { type: "refresh", token },
        undefined,
        undefined,
        (ack) => {
          this.token = token;
          const next = typeof ack.tokenExpiresAt === "number" ? ack.tokenExpiresAt : undefined;
          if (this._welcome && next !== undefined) this._welcome = { ...this._welcome, tokenExpiresAt: next };
          resolve(next);
        },
        reject,
        true,
      );
      this.pacer.prepend([req]);
    });
  }

  /**
   * Subscribes `sub` again after `retryAfterMs` (at least 1 s) plus up to
   * a second of jitter, if it is still wanted and nothing else is asking
   * for it by then (a reconnect's resubscribe). One timer per subscription.
   */
  private retrySubscribe(sub: Subscription, retryAfterMs: number | undefined): void {
    this.clock.clearTimeout(sub.retry);
    const delay = this.capRetry(Math.max(retryAfterMs ?? 0, 1000)) + Math.floor(this.random() * 1000);
    sub.retry = this.clock.setTimeout(() => {
      sub.retry = undefined;
      if (this.subs.get(sub.channel) !== sub || this._state !== "connected" || sub.live) return;
      if (sub.request && !sub.request.done) return;
      this.pacer.enqueue(this.subscribeRequest(sub, true));
    }, delay);
  }

  /** A subscribe frame for `sub`; its answer updates the subscription. */
  protected subscribeRequest(
    sub: Subscription,
    internal: boolean,
    timeoutMs?: number,
    onOk?: (r: SubscribeResult) => void,
    onErr?: (e: TidegateError) => void,
  ): Request {
    const { channel } = sub;
    const req = this.makeRequest<AckFrame>(
      "subscribe",
      { type: "subscribe", channel },
      channel,
      timeoutMs,
      (ack) => {
        if (sub.request === req) sub.request = undefined;
        sub.live = true;
        const since = req.frame.type === "subscribe" ? req.frame.since : undefined;
        const position = typeof ack.seq === "number" ? { seq: ack.seq } : {};
        if (this.subs.acked(sub, since, ack) && since !== undefined) {
          this.emit("gap", { channel, since, ...position });
        }
        this.presenceSets.acked(channel);
        onOk?.({ channel, recovered: ack.recovered, ...position });
      },
      (err) => {
        if (sub.request === req) sub.request = undefined;
        // Nothing will settle what was held (a lost connection resubscribes
        // from the same position, which still covers it): deliver it.
        if (sub.held && err.code !== "disconnected") {
          this.subs.acked(sub, undefined, { type: "ack", id: req.id });
        }
        const keep = internal && (err.code === "timeout" || err.code === "disconnected");
        if (internal && err.code === "hook_unavailable" && this.subs.get(channel) === sub) {
          // The backend could not answer a resubscribe (a reconnect storm,
          // its breaker open): keep the subscription and ask again later,
          // instead of forgetting it for good.
          this.retrySubscribe(sub, err.retryAfterMs);
        } else if (!keep && this.subs.get(channel) === sub) this.subs.delete(channel);
        if (onErr) onErr(err);
        else this.emit("error", err);
      },
      internal,
    );
    sub.request = req;
    return req;
  }
}
