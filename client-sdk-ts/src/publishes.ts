/**
 * What the client holds for publishes until they settle (PROTOCOL.md §17).
 *
 * A publish stays with the client from `publish()` to its one answer:
 * queued, written, and, when the connection drops before the answer, kept
 * and written again after the reconnect with the same key. So the count
 * and the bytes of unsettled publishes are bounded here (`maxQueue`,
 * `maxQueueBytes`), and `publish()` beyond either rejects `queue_full` at
 * once instead of growing without end during an outage.
 */

import { TidegateError } from "./errors.js";
import { keyOf, type Request } from "./request.js";

/** §17's default window: a key is remembered by the broker this long. */
export const DEFAULT_IDEMPOTENCY_WINDOW_MS = 300_000;
/** Most unsettled publishes (queued, in flight or waiting for a reconnect). */
export const DEFAULT_MAX_QUEUE = 1000;
/** Most bytes of unsettled publish frames (their JSON, UTF-8). */
export const DEFAULT_MAX_QUEUE_BYTES = 4 * 1024 * 1024;
/** The most a publish's deadline keeps clear of the window's end. */
const MAX_MARGIN_MS = 10_000;

/**
 * How long a publish may stay unsettled: the idempotency window less a
 * margin (a tenth of it, at most 10 s), so its last resend reaches the
 * broker while the broker still remembers the key (the window starts when
 * the broker published it, never before `publish()` was called). A
 * caller's `timeoutMs` can only shorten it.
 */
export function publishDeadlineMs(windowMs: number, timeoutMs?: number): number {
  const margin = Math.min(windowMs / 10, MAX_MARGIN_MS);
  const limit = Math.max(1, Math.floor(windowMs - margin));
  return timeoutMs === undefined ? limit : Math.max(0, Math.min(timeoutMs, limit));
}

/**
 * How long the broker remembers a key: the `welcome` limits'
 * `idempotencyWindowMs` when a broker advertises one (the contract's
 * `welcome` does not), else the `idempotencyWindowMs` option, else §17's
 * default; with both, the shorter.
 */
export function windowMs(option: number | undefined, advertised: number | undefined): number {
  const own = option ?? DEFAULT_IDEMPOTENCY_WINDOW_MS;
  return typeof advertised === "number" && advertised > 0 ? Math.min(advertised, own) : own;
}

/**
 * The `timeout` of a request with no answer in time. For a publish that
 * was sent it says what the app can do: the key, asked again within the
 * window, answers the one `seq` if it went out.
 */
export function noAnswer(req: Request, channel: string | undefined): TidegateError {
  const key = keyOf(req);
  const unsure = key !== undefined && req.attempts > 0;
  const message = unsure
    ? `publish got no answer in time after ${req.attempts} send(s): it may have gone out; publishing again with the same key within the idempotency window answers its seq`
    : `${req.kind} got no answer in time`;
  return new TidegateError("timeout", message, { id: req.id, channel, attempts: req.attempts, key });
}

/** The count and bytes of unsettled publishes, against their bounds. */
export class Unsettled {
  private held = 0;
  private heldBytes = 0;

  constructor(
    readonly maxCount: number,
    readonly maxBytes: number,
  ) {
    if (!(maxCount >= 1)) throw new RangeError("maxQueue must be at least 1");
    if (!(maxBytes >= 1)) throw new RangeError("maxQueueBytes must be at least 1");
  }

  get count(): number {
    return this.held;
  }

  get bytes(): number {
    return this.heldBytes;
  }

  /** Takes room for a publish of `bytes`; returns why not when there is none. */
  admit(bytes: number): string | undefined {
    if (this.held >= this.maxCount) {
      return `the client holds ${this.held} unsettled publishes (maxQueue ${this.maxCount})`;
    }
    if (this.heldBytes + bytes > this.maxBytes) {
      return `the client holds ${this.heldBytes} bytes of unsettled publishes; ${bytes} more would pass maxQueueBytes (${this.maxBytes})`;
    }
    this.held += 1;
    this.heldBytes += bytes;
    return undefined;
  }

  /** A publish settled: its room is free again. */
  release(bytes: number): void {
    this.held = Math.max(0, this.held - 1);
    this.heldBytes = Math.max(0, this.heldBytes - bytes);
  }
}
