/**
 * Token refresh on the socket (PROTOCOL.md §2): before the token's `exp`
 * (`welcome.tokenExpiresAt`), the client asks `getToken()` for a new one
 * and sends it as a `refresh` frame, so the server does not close the
 * socket with 4001 and nothing reconnects. The schedule is a pure
 * function; `TokenRefresher` runs it on the connection's clock.
 */
import type { Clock, TimerHandle } from "./clock.js";

/** Refresh this long before `exp` at the latest. */
export const REFRESH_BEFORE_EXPIRY_MS = 30_000;
/** ...or at this fraction of the token's remaining life, if that is earlier. */
export const REFRESH_AT_FRACTION = 0.8;
/** Up to this fraction earlier still, at random, so that many clients given
 * tokens at the same moment do not all refresh in the same instant. */
export const REFRESH_JITTER = 0.1;
/** After a failed refresh, try again at most this often. */
export const REFRESH_RETRY_MIN_MS = 1000;

/** ...but never before this fraction of it: a token that lives less than a
 * minute is not refreshed the moment it arrives (over and over). */
export const REFRESH_NOT_BEFORE_FRACTION = 0.5;

/**
 * How long to wait before refreshing a token that expires in `remainingMs`:
 * the earlier of 80% of its remaining life and 30 s before it expires, but
 * not before half of it, minus up to 10% at random (`random` in [0, 1)).
 * Never negative.
 */
export function refreshDelay(remainingMs: number, random: () => number): number {
  if (!(remainingMs > 0)) return 0;
  const planned = Math.min(remainingMs * REFRESH_AT_FRACTION, remainingMs - REFRESH_BEFORE_EXPIRY_MS);
  const base = Math.max(remainingMs * REFRESH_NOT_BEFORE_FRACTION, planned);
  return Math.floor(base * (1 - REFRESH_JITTER * random()));
}

/**
 * After a refresh failed with `remainingMs` left on the current token: when
 * to try again (half the time left, at least a second), or undefined when
 * there is no time left for another attempt (the server will close with
 * 4001 and the client reconnects with a fresh token).
 */
export function retryDelay(remainingMs: number): number | undefined {
  if (remainingMs <= REFRESH_RETRY_MIN_MS * 2) return undefined;
  return Math.max(REFRESH_RETRY_MIN_MS, Math.floor(remainingMs / 2));
}

/** What the refresher needs of the connection. */
export interface RefreshHost {
  clock: Clock;
  random: () => number;
  getToken(): Promise<string>;
  /** Sends a `refresh` frame: the ack's `tokenExpiresAt`, or a rejection. */
  send(token: string): Promise<number | undefined>;
  /** A refresh failed (getToken() threw, or the server refused it). */
  failed(cause: unknown): void;
  /** A refresh went through (the next one is planned already). */
  refreshed(tokenExpiresAt: number): void;
}

/** One connection's refresh timer. */
export class TokenRefresher {
  private timer?: TimerHandle;
  /** When the current token expires, on `clock` (not the wall clock). */
  private deadline?: number;
  /** Bumped by `cancel()`: a refresh started before it is dropped. */
  private round = 0;

  constructor(private readonly host: RefreshHost) {}

  /** Plans the refresh of a token expiring at `expiresAtMs` (unix ms). */
  schedule(expiresAtMs: number | undefined): void {
    if (typeof expiresAtMs !== "number") return this.cancel();
    // The wall clock is read once: from here on the injected clock counts.
    const remaining = expiresAtMs - Date.now();
    this.deadline = this.host.clock.now() + remaining;
    this.arm(refreshDelay(remaining, this.host.random));
  }

  /** The socket is gone: nothing more until the next `schedule`. */
  cancel(): void {
    this.round += 1;
    this.host.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(delay: number | undefined): void {
    this.cancel();
    if (delay === undefined) return;
    const round = this.round;
    this.timer = this.host.clock.setTimeout(() => {
      this.timer = undefined;
      if (round === this.round) void this.refresh(round);
    }, delay);
  }

  private async refresh(round: number): Promise<void> {
    let next: number | undefined;
    try {
      const token = await this.host.getToken();
      if (round !== this.round) return;
      next = await this.host.send(token);
    } catch (cause) {
      const code = (cause as { code?: unknown }).code;
      // Gone with the socket: the next welcome schedules afresh.
      if (round !== this.round || code === "disconnected" || code === "closed") return;
      this.host.failed(cause);
      // Again while the current token lasts.
      if (this.deadline !== undefined) this.arm(retryDelay(this.deadline - this.host.clock.now()));
      return;
    }
    if (round !== this.round) return;
    this.schedule(next);
    if (next !== undefined) this.host.refreshed(next);
  }
}
