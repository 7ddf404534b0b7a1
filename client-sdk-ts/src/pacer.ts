/**
 * Client-side pacing: a FIFO of frames waiting to be sent, drained through
 * local token buckets that mirror the server's (the `welcome` limits, times a
 * headroom factor, corrected by every `budget` frame). Bursts are smoothed
 * here instead of being dropped by the server.
 */
import { TokenBucket } from "./bucket.js";
import type { Clock, TimerHandle } from "./clock.js";
import type { Request } from "./request.js";
import type { BudgetFrame, BucketState, Limits } from "./types.js";

export interface PacerOptions {
  clock: Clock;
  /** Fraction of the server's numbers to use (0 < headroom ≤ 1). */
  headroom: number;
  /** When false, frames go out as fast as the socket takes them. */
  pacing: boolean;
  /** Writes one frame; false when it was not written (rejected locally). */
  send(request: Request): boolean;
}

export interface BucketView {
  tokens: number;
  capacity: number;
  ratePerSec: number;
}

export class Pacer {
  private readonly queue: Request[] = [];
  private connection?: TokenBucket;
  private account?: TokenBucket;
  private active = false;
  private pausedUntil = 0;
  private timer?: TimerHandle;
  private timerAt = 0;

  constructor(private readonly opts: PacerOptions) {}

  /** Shape the buckets from a `welcome` frame's limits; they start full like the server's. */
  configure(limits: Limits): void {
    const { clock, headroom } = this.opts;
    this.connection = new TokenBucket(
      scaledCapacity(limits.burst, headroom),
      limits.messagesPerSec * headroom,
      clock,
    );
    this.account = new TokenBucket(
      scaledCapacity(limits.accountBurst, headroom),
      limits.accountMessagesPerSec * headroom,
      clock,
    );
    this.pausedUntil = 0;
  }

  /** Start draining (the socket is open and welcomed). */
  activate(): void {
    this.active = true;
    this.flush();
  }

  /** Stop draining (the socket closed); the queue is kept. */
  deactivate(): void {
    this.active = false;
    this.cancelTimer();
  }

  get size(): number {
    return this.queue.length;
  }

  count(predicate: (r: Request) => boolean): number {
    let n = 0;
    for (const r of this.queue) if (predicate(r)) n += 1;
    return n;
  }

  enqueue(request: Request): void {
    this.queue.push(request);
    this.flush();
  }

  /** Put frames at the head, in the given order (resubscribes after a reconnect). */
  prepend(requests: Request[]): void {
    this.queue.unshift(...requests);
    this.flush();
  }

  /** Put frames the server dropped back at the head, in their original order. */
  requeueFront(requests: Request[]): void {
    const sorted = [...requests].sort((a, b) => a.id - b.id);
    this.queue.unshift(...sorted);
    this.flush();
  }

  remove(request: Request): boolean {
    const i = this.queue.indexOf(request);
    if (i < 0) return false;
    this.queue.splice(i, 1);
    return true;
  }

  /** Removes and returns every queued request matching `predicate`. */
  drain(predicate: (r: Request) => boolean): Request[] {
    const out: Request[] = [];
    for (let i = this.queue.length - 1; i >= 0; i -= 1) {
      const r = this.queue[i]!;
      if (predicate(r)) {
        this.queue.splice(i, 1);
        out.unshift(r);
      }
    }
    return out;
  }

  /** The server dropped frames (`rate_limited`): its bucket is empty for `retryAfterMs`. */
  pause(retryAfterMs: number): void {
    const until = this.opts.clock.now() + Math.max(0, retryAfterMs);
    this.pausedUntil = Math.max(this.pausedUntil, until);
    this.connection?.emptyFor(retryAfterMs);
    this.cancelTimer();
  }

  /** A `budget` frame: never believe we have more than the server says. */
  onBudget(frame: BudgetFrame): void {
    const { headroom } = this.opts;
    syncBucket(this.connection, frame.connection, headroom);
    syncBucket(this.account, frame.account, headroom);
    this.flush();
  }

  view(): { connection?: BucketView; account?: BucketView } {
    return { connection: viewOf(this.connection), account: viewOf(this.account) };
  }

  /** Sends what the buckets allow now, and sets one timer for the rest. */
  flush(): void {
    if (!this.active) return;
    const { clock, pacing } = this.opts;
    while (this.queue.length > 0 && this.active) {
      const now = clock.now();
      if (now < this.pausedUntil) return this.schedule(this.pausedUntil - now);
      const head = this.queue[0]!;
      const wait = pacing ? this.waitFor(head.cost) : 0;
      if (wait > 0) return this.schedule(wait);
      this.queue.shift();
      if (this.opts.send(head) && pacing) {
        this.connection?.tryTake(head.cost);
        this.account?.tryTake(head.cost);
      }
    }
  }

  private waitFor(cost: number): number {
    if (cost <= 0) return 0;
    return Math.max(this.connection?.msUntil(cost) ?? 0, this.account?.msUntil(cost) ?? 0);
  }

  private schedule(ms: number): void {
    if (!Number.isFinite(ms)) ms = 1000;
    const at = this.opts.clock.now() + ms;
    if (this.timer !== undefined && this.timerAt <= at) return;
    this.cancelTimer();
    this.timerAt = at;
    this.timer = this.opts.clock.setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, Math.max(1, ms));
  }

  private cancelTimer(): void {
    if (this.timer !== undefined) this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}

function scaledCapacity(burst: number, headroom: number): number {
  return Math.max(1, Math.floor(burst * headroom));
}

function syncBucket(bucket: TokenBucket | undefined, state: BucketState | undefined, headroom: number) {
  if (!bucket || !state) return;
  const capacity = scaledCapacity(state.capacity, headroom);
  const rate = state.refillPerSec * headroom;
  if (capacity !== bucket.capacity || rate !== bucket.ratePerSec) bucket.reshape(capacity, rate);
  bucket.clampTo(state.remaining);
}

function viewOf(bucket: TokenBucket | undefined): BucketView | undefined {
  if (!bucket) return undefined;
  return { tokens: Math.max(0, bucket.available()), capacity: bucket.capacity, ratePerSec: bucket.ratePerSec };
}
