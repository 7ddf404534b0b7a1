/**
 * The connection half of the client: one socket at a time, the welcome,
 * the close policy, reconnects and the requests in flight. The public API
 * is in `client.ts` (TidegateClient extends this); frames are dispatched by
 * `frames.ts`.
 */
import { realClock, type Clock, type TimerHandle } from "./clock.js";
import { Emitter } from "./emitter.js";
import { TidegateError, closedError, tokenError, tooLarge } from "./errors.js";
import { Pacer, type BucketView } from "./pacer.js";
import { DEFAULT_MAX_QUEUE, DEFAULT_MAX_QUEUE_BYTES, noAnswer, Unsettled, windowMs } from "./publishes.js";
import { closePolicy } from "./codes.js";
import { MAX_RETRY_AFTER_MS, planReconnect, type ReconnectSettings } from "./reconnect.js";
import { TokenRefresher } from "./refresh.js";
import { failInFlight } from "./in-flight.js";
import type { Request, RequestKind, UnsentFrame } from "./request.js";
import { Subscriptions, type Subscription } from "./subscriptions.js";
import { joinServerChannels, serverChannels } from "./server-channels.js";
import { tokenExpired } from "./token.js";
import type { Transport, TransportClose, WebSocketConstructor } from "./transport.js";
import { TransportChooser, type TransportKind } from "./transports/auto.js";
import { FrameHandler, refusalError } from "./frames.js";
import { frameBytes } from "./wire.js";
import type {
  ClientEvents,
  ClientOptions,
  ClientState,
  ExpiryFrame,
  Limits,
  SubscribeResult,
  WelcomeFrame,
} from "./types.js";

export const SUBPROTOCOL = "tidegate.v1";

export interface Waiter {
  resolve(w: WelcomeFrame): void;
  reject(e: TidegateError): void;
  timer: TimerHandle;
}

export abstract class Connection extends Emitter<ClientEvents> {
  /** @internal */ readonly clock: Clock;
  /** @internal */ readonly pacer: Pacer;
  /** @internal */ readonly subs = new Subscriptions((f) => this.emit("message", f));
  /** @internal */ readonly inFlight = new Map<number, Request>();
  /** @internal */ readonly maxRetries: number;
  /** @internal */ retryAfterHintMs?: number;
  /** @internal */ accountLimitedSeen = false;

  protected readonly opts: ClientOptions;
  protected readonly random: () => number;
  /** WebSocket or SSE for the next attempt (`transports/auto.ts`). */
  protected readonly transports: TransportChooser;
  protected readonly settings: ReconnectSettings;
  protected readonly timeoutMs: number;
  /** Count and bytes of publishes not yet settled, against `maxQueue`/`maxQueueBytes`. */
  protected readonly unsettled: Unsettled;
  protected readonly frames: FrameHandler;
  protected _state: ClientState = "idle";
  protected _welcome?: WelcomeFrame;
  protected transport?: Transport;
  protected generation = 0;
  protected token?: string;
  protected needNewToken = false;
  protected step = 0;
  protected attempt = 0;
  protected connectedAt = 0;
  protected reconnectTimer?: TimerHandle;
  protected welcomeTimer?: TimerHandle;
  /** Sends a fresh token on the socket before the current one expires. */
  protected readonly refresher: TokenRefresher;
  protected waiters: Waiter[] = [];
  protected nextId = 1;

  constructor(options: ClientOptions) {
    super();
    this.opts = options;
    this.clock = options.clock ?? realClock;
    this.random = options.random ?? Math.random;
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.unsettled = new Unsettled(
      options.maxQueue ?? DEFAULT_MAX_QUEUE,
      options.maxQueueBytes ?? DEFAULT_MAX_QUEUE_BYTES,
    );
    if (!((options.idempotencyWindowMs ?? 1) > 0)) throw new RangeError("idempotencyWindowMs must be positive");
    this.maxRetries = options.maxRetries ?? 5;
    this.settings = {
      maxRetryAfterMs: options.maxRetryAfterMs ?? MAX_RETRY_AFTER_MS,
      minDelayMs: options.minReconnectDelayMs ?? 1000,
      maxDelayMs: options.maxReconnectDelayMs ?? 30_000,
      accountLimitedDelayMs: options.accountLimitedDelayMs ?? 30_000,
      connectionCapDelayMs: options.connectionCapDelayMs ?? 5000,
      stableAfterMs: options.stableAfterMs ?? 10_000,
    };
    const headroom = options.headroom ?? 0.9;
    if (!(headroom > 0 && headroom <= 1)) throw new RangeError("headroom must be in (0, 1]");
    this.transports = new TransportChooser(options.transport, options.WebSocket, options.fetch);
    this.pacer = new Pacer({
      clock: this.clock,
      headroom,
      pacing: options.pacing ?? true,
      send: (r) => this.sendRequest(r),
    });
    this.frames = new FrameHandler(this);
    this.refresher = new TokenRefresher({
      clock: this.clock,
      random: this.random,
      getToken: async () => {
        const fresh = await this.opts.getToken!();
        if (typeof fresh !== "string" || fresh.length === 0) {
          throw new TypeError("getToken() returned no token");
        }
        return fresh;
      },
      send: (token) =>
        this._state === "connected" ? this.sendRefresh(token) : Promise.reject(closedError()),
      failed: (cause) =>
        this.emit("error", cause instanceof TidegateError ? cause : tokenError(cause)),
      refreshed: (tokenExpiresAt) => this.emit("tokenRefresh", { tokenExpiresAt }),
    });
  }

  // ------------------------------------------------------------ accessors --

  get state(): ClientState {
    return this._state;
  }

  /** The last `welcome` frame (undefined before the first). */
  get welcome(): WelcomeFrame | undefined {
    return this._welcome;
  }

  /** The transport of the current (or next) connection attempt. */
  get transportKind(): TransportKind {
    return this.transports.current;
  }

  get limits(): Limits | undefined {
    return this._welcome?.limits;
  }

  /** The local view of the budget: bucket balances and the queue. */
  budget(): { connection?: BucketView; account?: BucketView; queued: number; inFlight: number } {
    return { ...this.pacer.view(), queued: this.pacer.size, inFlight: this.inFlight.size };
  }

  /** How long the broker remembers a publish's key (`windowMs` in publishes.ts). */
  idempotencyWindowMs(): number {
    return windowMs(this.opts.idempotencyWindowMs, this._welcome?.limits.idempotencyWindowMs);
  }

  /** The highest `seq` delivered on a channel. */
  lastSeq(channel: string): number | undefined {
    return this.subs.get(channel)?.lastSeq;
  }

  // ------------------------------------------------------------ requests --

  /** @internal */
  makeRequest<T>(
    kind: RequestKind,
    frame: UnsentFrame,
    channel: string | undefined,
    timeoutMs: number | undefined,
    resolve: (value: T) => void,
    reject: (error: TidegateError) => void,
    internal = false,
  ): Request {
    const req: Request = {
      id: this.nextId++,
      kind,
      frame,
      cost: kind === "budget" ? 0 : 1,
      channel,
      internal,
      attempts: 0,
      done: false,
      resolve: (value) => {
        if (req.done) return;
        req.done = true;
        this.clock.clearTimeout(req.timer);
        resolve(value as T);
      },
      reject: (error) => {
        if (req.done) return;
        req.done = true;
        this.clock.clearTimeout(req.timer);
        reject(error);
      },
    };
    req.timer = this.clock.setTimeout(() => {
      this.pacer.remove(req);
      this.inFlight.delete(req.id);
      req.reject(noAnswer(req, channel));
    }, timeoutMs ?? this.timeoutMs);
    return req;
  }

  /** @internal A `presence_diff` or unsolicited `presence_stats` (`presence.ts`). */
  abstract onPresenceFrame(frame: { type: string; channel: string }): void;

  /** A subscribe frame for `sub` (made by the client half). */
  protected abstract subscribeRequest(
    sub: Subscription,
    internal: boolean,
    timeoutMs?: number,
    onOk?: (r: SubscribeResult) => void,
    onErr?: (e: TidegateError) => void,
  ): Request;

  /** Writes one request to the socket; false when it was not written. */
  protected sendRequest(req: Request): boolean {
    if (!this.transport || this._state !== "connected" || req.done) return false;
    if (req.frame.type === "subscribe") {
      const since = this.subs.get(req.channel!)?.lastSeq;
      if (since !== undefined) req.frame.since = since;
      else delete req.frame.since;
    }
    const frame = { ...req.frame, id: req.id }; // a new ClientFrame each send
    const max = this._welcome?.limits.maxPayloadBytes;
    if (max && frameBytes(frame) > max) {
      req.reject(tooLarge(req.channel, max));
      return false;
    }
    req.attempts += 1;
    this.inFlight.set(req.id, req);
    try {
      this.transport.send(frame);
    } catch (cause) {
      this.inFlight.delete(req.id);
      req.reject(new TidegateError("disconnected", "the socket refused the frame", { cause }));
      return false;
    }
    return true;
  }

  // ---------------------------------------------------------- connection --

  protected async startAttempt(): Promise<void> {
    const gen = ++this.generation;
    this.setState("connecting");
    let token: string | undefined;
    try {
      token = await this.obtainToken();
    } catch (err) {
      if (gen !== this.generation) return;
      const e = err instanceof TidegateError ? err : tokenError(err);
      if (e.code === "unauthorized") return this.shutdown(e, true);
      this.emit("error", e);
      return this.onTransportClose(gen, { code: 1006, reason: "getToken failed", wasOpen: false });
    }
    if (gen !== this.generation) return;
    this.retryAfterHintMs = undefined;
    this.accountLimitedSeen = false;
    try {
      const protocols = token === undefined ? [SUBPROTOCOL] : [SUBPROTOCOL, `bearer.${token}`];
      this.transport = this.transports.factory()(this.opts.url, protocols, {
        open: (protocol) => {
          if (gen !== this.generation) return;
          this.welcomeTimer = this.clock.setTimeout(() => {
            this.transport?.close(1000, "no welcome");
            this.onTransportClose(gen, { code: 1006, reason: "no welcome frame", wasOpen: true });
          }, this.opts.welcomeTimeoutMs ?? 10_000);
          this.emit("open", { protocol });
        },
        message: (frame) => {
          if (gen === this.generation) this.frames.handle(frame);
        },
        close: (info) => this.onTransportClose(gen, info),
      });
    } catch (cause) {
      this.shutdown(new TidegateError("bad_request", `cannot open ${this.opts.url}`, { cause }), true);
    }
  }

  /** Whether the client has a token (else the connect hook reads its cookies, §15). */
  protected hasToken(): boolean {
    return Boolean(this.opts.token || this.opts.getToken);
  }

  /** The token for the next handshake, or undefined for a client without one. */
  protected async obtainToken(): Promise<string | undefined> {
    const { getToken } = this.opts;
    if (!this.hasToken()) return undefined;
    const now = Date.now();
    if (getToken) {
      if (!this.token || this.needNewToken || tokenExpired(this.token, now)) {
        const fresh = await getToken();
        if (typeof fresh !== "string" || fresh.length === 0) {
          throw tokenError(new TypeError("getToken() returned no token"));
        }
        this.token = fresh;
        this.needNewToken = false;
      }
      return this.token;
    }
    const token = this.opts.token!;
    if (tokenExpired(token, now, 0)) {
      throw new TidegateError("unauthorized", "the token has expired and there is no getToken()");
    }
    return token;
  }

  /** @internal Called by the frame handler on `welcome`. */
  onWelcome(welcome: WelcomeFrame): void {
    this.clock.clearTimeout(this.welcomeTimer);
    this._welcome = welcome;
    this.connectedAt = this.clock.now();
    this.attempt = 0;
    this.pacer.configure(welcome.limits);
    this.setState("connected");
    const joined = joinServerChannels(this.subs, serverChannels(welcome));
    const resubscribes: Request[] = [];
    for (const sub of this.subs.all()) {
      if (joined.channels.has(sub.channel)) continue;
      sub.live = false;
      const pending = sub.request && !sub.request.done ? sub.request : undefined;
      resubscribes.push(pending ?? this.subscribeRequest(sub, true));
    }
    this.pacer.prepend(resubscribes);
    for (const { sub, seq } of joined.settled) {
      // The app's subscribe to a channel the broker joined: answered by the welcome.
      const req = sub.request!;
      this.pacer.remove(req);
      if (req.frame.type === "subscribe") delete req.frame.since;
      req.resolve({ type: "ack", id: req.id, ...(seq === undefined ? {} : { seq }) });
    }
    for (const gap of joined.gaps) this.emit("gap", gap);
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      this.clock.clearTimeout(w.timer);
      w.resolve(welcome);
    }
    this.emit("welcome", welcome);
    this.pacer.activate();
    if (this.opts.getToken) this.refresher.schedule(welcome.tokenExpiresAt);
  }

  /**
   * @internal An `expiry` frame (§15): a refresh hook extended the
   * connection's life. Nothing to send: the broker did the refreshing.
   */
  onExpiry(f: ExpiryFrame): void {
    if (typeof f.tokenExpiresAt !== "number" || !this._welcome) return;
    this._welcome = { ...this._welcome, tokenExpiresAt: f.tokenExpiresAt };
    this.emit("expiry", { tokenExpiresAt: f.tokenExpiresAt });
  }

  /** @internal A wait the server asked for, cut to `maxRetryAfterMs`. */
  capRetry(ms: number): number {
    return Math.min(ms, this.settings.maxRetryAfterMs ?? MAX_RETRY_AFTER_MS);
  }

  /** @internal The server ended a subscription (made by the client half). */
  abstract forget(channel: string): void;

  /**
   * @internal Rejects a request still queued or in flight with `error`;
   * returns whether it had been written to the socket.
   */
  abandon(req: Request | undefined, error: TidegateError): boolean {
    if (!req || req.done) return false;
    const sent = this.inFlight.has(req.id);
    this.pacer.remove(req);
    this.inFlight.delete(req.id);
    req.reject(error);
    return sent;
  }

  /** A `refresh` frame (made by the client half): the ack's `tokenExpiresAt`. */
  protected abstract sendRefresh(token: string): Promise<number | undefined>;

  protected onTransportClose(gen: number, info: TransportClose): void {
    if (gen !== this.generation || this._state === "closed") return;
    this.generation += 1;
    this.transport = undefined;
    this.clock.clearTimeout(this.welcomeTimer);
    this.refresher.cancel();
    const wasConnected = this._state === "connected";
    // A proxy's refusal of the upgrade is not the broker's: it is not reported.
    if (this.transports.closed(info, wasConnected)) info = { ...info, refusal: undefined };
    this.pacer.deactivate();
    failInFlight(this, info.code, info.wasOpen && closePolicy(info.code) === "fix");
    const decision = planReconnect(
      {
        code: info.code,
        reason: info.reason,
        wasOpen: info.wasOpen,
        refusal: info.refusal,
        retryAfterHintMs: this.retryAfterHintMs,
        step: this.step,
        connectedForMs: wasConnected ? this.clock.now() - this.connectedAt : undefined,
        hasGetToken: Boolean(this.opts.getToken),
        hasToken: this.hasToken(),
      },
      this.settings,
      this.random,
    );
    if (decision.accountRateLimited && !this.accountLimitedSeen) {
      this.emit(
        "error",
        new TidegateError("account_rate_limited", "the account's message budget is exhausted", {
          closeCode: info.code,
        }),
      );
    }
    if (decision.banned && !info.refusal) {
      this.emit(
        "error",
        new TidegateError("banned", "an operator banned this account or address; the socket was closed", {
          closeCode: info.code,
        }),
      );
    }
    if (info.refusal) this.emit("error", refusalError(info.refusal));
    if (decision.refreshToken) this.needNewToken = true;
    const base = { code: info.code, reason: info.reason, wasOpen: info.wasOpen, refusal: info.refusal };
    if (decision.terminal) {
      this.emit("close", { ...base, reconnect: null });
      const { code, message } = decision.terminal;
      const error = new TidegateError(code, message, {
        status: info.refusal?.status,
        retryAfterMs: info.refusal?.retryAfterMs,
      });
      return this.shutdown(error, !info.refusal); // a refusal was already emitted
    }
    if (this.opts.reconnect === false) {
      this.emit("close", { ...base, reconnect: null });
      return this.setState("idle");
    }
    this.step = decision.nextStep;
    this.attempt += 1;
    this.emit("close", { ...base, reconnect: { delayMs: decision.delayMs, attempt: this.attempt } });
    this.setState("reconnecting");
    this.reconnectTimer = this.clock.setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.startAttempt();
    }, decision.delayMs);
  }

  protected shutdown(error: TidegateError, emitError = false): void {
    this.generation += 1;
    this.clock.clearTimeout(this.reconnectTimer);
    this.clock.clearTimeout(this.welcomeTimer);
    this.refresher.cancel();
    this.transport?.close(1000, "client closed");
    this.transport = undefined;
    this.pacer.deactivate();
    if (emitError) this.emit("error", error);
    const pending = [...this.inFlight.values(), ...this.pacer.drain(() => true)];
    this.inFlight.clear();
    for (const sub of this.subs.all()) if (sub.request) pending.push(sub.request);
    for (const req of pending) {
      if (req.kind === "unsubscribe") req.resolve(undefined);
      else req.reject(error);
    }
    for (const sub of this.subs.all()) {
      this.clock.clearTimeout(sub.retry);
      this.subs.delete(sub.channel);
    }
    for (const w of this.waiters) {
      this.clock.clearTimeout(w.timer);
      w.reject(error);
    }
    this.waiters = [];
    this.setState("closed");
  }

  protected setState(state: ClientState): void {
    const previous = this._state;
    if (previous === state) return;
    this._state = state;
    this.emit("state", { state, previous });
  }

  /**
   * @internal After `slow_consumer`: every live subscription is asked
   * again with `since` its position, so what the server dropped comes back
   * from history, in order, before anything newer is delivered. One whose
   * subscribe is already on its way is left to it (its ack is after those
   * drops, so its recovery covers them).
   */
  recoverAll(): void {
    const resubscribes: Request[] = [];
    for (const sub of this.subs.all()) {
      if (!sub.live || (sub.request && !sub.request.done)) continue;
      sub.held = [];
      resubscribes.push(this.subscribeRequest(sub, true));
    }
    this.pacer.prepend(resubscribes);
  }

  /** @internal Lets the frame handler emit through the typed emitter. */
  fire<K extends keyof ClientEvents>(event: K, payload: ClientEvents[K]): void {
    this.emit(event, payload);
  }
}
