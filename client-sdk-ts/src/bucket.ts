import type { Clock } from "./clock.js";

/**
 * A token bucket that mirrors one of the server's buckets: `capacity`
 * tokens, refilled continuously at `ratePerSec`. Pure apart from the clock.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    public capacity: number,
    public ratePerSec: number,
    private readonly clock: Clock,
  ) {
    this.tokens = capacity;
    this.last = clock.now();
  }

  private refill(): void {
    const now = this.clock.now();
    const elapsed = Math.max(0, now - this.last);
    this.last = now;
    this.tokens = Math.min(this.capacity, this.tokens + (elapsed / 1000) * this.ratePerSec);
    // (Tokens may be negative after `emptyFor`; refill brings them back.)
  }

  /** Whole and fractional tokens available now. */
  available(): number {
    this.refill();
    return this.tokens;
  }

  /** Takes `cost` tokens when there are enough; false (and no change) otherwise. */
  tryTake(cost: number): boolean {
    if (cost <= 0) return true;
    this.refill();
    if (this.tokens + 1e-9 >= cost) {
      this.tokens = Math.max(0, this.tokens - cost);
      return true;
    }
    return false;
  }

  /** Milliseconds until `cost` tokens are available (0 when they are now). */
  msUntil(cost: number): number {
    this.refill();
    const missing = cost - this.tokens;
    if (missing <= 1e-9) return 0;
    if (this.ratePerSec <= 0) return Number.POSITIVE_INFINITY;
    return Math.ceil((missing * 1000) / this.ratePerSec);
  }

  /** Lowers the balance to at most `tokens` (the server said so). */
  clampTo(tokens: number): void {
    this.refill();
    this.tokens = Math.min(this.tokens, Math.max(0, tokens));
  }

  /**
   * The server's bucket is empty and earns its next token in `ms`: set the
   * balance so that one token is here exactly then (it may go negative).
   */
  emptyFor(ms: number): void {
    this.refill();
    this.tokens = Math.min(this.tokens, 1 - (Math.max(0, ms) / 1000) * this.ratePerSec);
  }

  /** Changes the shape, keeping the balance within the new capacity. */
  reshape(capacity: number, ratePerSec: number): void {
    this.refill();
    this.capacity = capacity;
    this.ratePerSec = ratePerSec;
    this.tokens = Math.min(this.tokens, capacity);
  }
}
