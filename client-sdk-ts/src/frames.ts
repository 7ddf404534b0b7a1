/**
 * Server → client frames (PROTOCOL.md §3): each goes to the request it
 * answers, the subscription it belongs to, or an event.
 */
import { isTemporary, type ErrorCode } from "./codes.js";
import { TidegateError } from "./errors.js";
import type { ConnectionHost } from "./host.js";
import { keyOf, type Request } from "./request.js";
import type {
  AckFrame,
  BudgetFrame,
  ErrorFrame,
  ExpiryFrame,
  MessageFrame,
  PublishResult,
  Refusal,
  ServerFrame,
  WelcomeFrame,
} from "./types.js";

const DEFAULT_RETRY_AFTER_MS = 1000;

export class FrameHandler {
  constructor(private readonly client: ConnectionHost) {}

  /** One decoded frame from the transport (a text that was not JSON never gets here). */
  handle(frame: ServerFrame): void {
    if (!frame || typeof frame !== "object") return; // a custom transport's slip
    switch (frame.type) {
      case "welcome":
        return this.client.onWelcome(frame as WelcomeFrame);
      case "ack":
        return this.onAck(frame as AckFrame);
      case "message":
        return this.onMessage(frame as MessageFrame);
      case "error":
        return this.onError(frame as ErrorFrame);
      case "budget":
        return this.onBudget(frame as BudgetFrame);
      case "rpc":
        return this.take(frame["id"])?.resolve(frame); // the `RpcReplyFrame`, for `client.rpc`
      case "expiry":
        return this.client.onExpiry(frame as ExpiryFrame);
      case "presence":
      case "presence_stats":
      case "presence_diff": {
        const id = (frame as { id?: unknown }).id;
        if (id !== undefined) return this.take(id)?.resolve(frame);
        return this.client.onPresenceFrame(frame as { type: string; channel: string });
      }
      default:
        return; // A newer server's frame: ignore.
    }
  }

  private take(id: unknown): Request | undefined {
    const key = typeof id === "number" ? id : Number(id);
    const req = this.client.inFlight.get(key);
    if (req) this.client.inFlight.delete(key);
    return req;
  }

  private onAck(f: AckFrame): void {
    const req = this.take(f.id);
    if (!req) return;
    if (req.kind === "publish") {
      const result: PublishResult = { seq: f.seq!, attempts: req.attempts, key: String(keyOf(req)) };
      if (f.duplicate === true) result.duplicate = true;
      req.resolve(result);
    }
    else if (req.kind === "subscribe" || req.kind === "refresh") req.resolve(f);
    else req.resolve(undefined);
  }

  private onMessage(f: MessageFrame): void {
    if (typeof f.channel !== "string" || typeof f.seq !== "number") return;
    this.client.subs.receive(f);
  }

  private onBudget(f: BudgetFrame): void {
    this.client.pacer.onBudget(f);
    this.client.fire("budget", f);
    if (f.id !== undefined) this.take(f.id)?.resolve(f);
  }

  private onError(f: ErrorFrame): void {
    const client = this.client;
    if (f.code === "rate_limited") return this.onRateLimited(f);
    if (f.id !== undefined) {
      if (this.retryable(f)) return this.onRateLimited(f);
      const req = this.take(f.id);
      req?.reject(
        new TidegateError(f.code as ErrorCode, f.message ?? f.code, {
          id: f.id,
          retryAfterMs: f.retryAfterMs,
          channel: req.channel,
          attempts: req.attempts,
          key: keyOf(req),
        }),
      );
      return;
    }
    if (f.code === "slow_consumer") {
      client.fire("slowConsumer", { dropped: f.dropped ?? 0 });
      client.recoverAll();
      return;
    }
    if (f.code === "forbidden" && typeof f.channel === "string") {
      // A refreshed token no longer allows this subscription: the server
      // ended it; forget it, so no reconnect subscribes to it again.
      client.forget(f.channel);
    }
    if (typeof f.retryAfterMs === "number") client.retryAfterHintMs = client.capRetry(f.retryAfterMs);
    if (f.code === "account_rate_limited") client.accountLimitedSeen = true;
    client.fire(
      "error",
      new TidegateError(f.code as ErrorCode, f.message ?? f.code, {
        retryAfterMs: f.retryAfterMs,
        channel: f.channel,
      }),
    );
  }

  /**
   * A publish refused for a passing reason (`internal` while Redis fails
   * over, `draining`, `node_overloaded`, …): refused publishes use up
   * nothing (§17), so it is sent again, with its key, like a dropped frame.
   */
  private retryable(f: ErrorFrame): boolean {
    const req = this.client.inFlight.get(typeof f.id === "number" ? f.id : Number(f.id));
    return req?.kind === "publish" && isTemporary(f.code as ErrorCode);
  }

  /**
   * The server dropped frames (or refused a publish for a passing reason):
   * wait `retryAfterMs` (the pacer holds every send), then resend them in
   * order with their ids and keys; past `maxRetries` sends, reject with
   * the server's code.
   */
  private onRateLimited(f: ErrorFrame): void {
    const client = this.client;
    const retryAfterMs = client.capRetry(f.retryAfterMs ?? DEFAULT_RETRY_AFTER_MS);
    const ids = [...(f.ids ?? []), ...(f.id !== undefined ? [f.id] : [])];
    if (f.code === "rate_limited") {
      client.fire("rateLimited", { retryAfterMs, dropped: f.dropped ?? ids.length, ids });
    }
    client.pacer.pause(retryAfterMs);
    const retry: Request[] = [];
    for (const id of ids) {
      const req = this.take(id);
      if (!req) continue;
      if (req.attempts > client.maxRetries) {
        const code = f.code as ErrorCode;
        req.reject(
          new TidegateError(code, `refused by the server (${code}) ${req.attempts} times`, {
            id: req.id,
            retryAfterMs,
            channel: req.channel,
            attempts: req.attempts,
            key: keyOf(req),
          }),
        );
      } else retry.push(req);
    }
    client.pacer.requeueFront(retry);
  }
}

/** The error event for a handshake refused before the upgrade. */
export function refusalError(refusal: Refusal): TidegateError {
  const fallback: ErrorCode =
    refusal.status === 401
      ? "unauthorized"
      : refusal.status === 503
        ? "node_overloaded"
        : refusal.status === 429
          ? "handshake_rate_limited"
          : "internal";
  const code = (refusal.code ?? fallback) as ErrorCode;
  const message = refusal.message ?? `handshake refused: HTTP ${refusal.status} ${code}`;
  return new TidegateError(code, message, {
    status: refusal.status,
    retryAfterMs: refusal.retryAfterMs,
  });
}
