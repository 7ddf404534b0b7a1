/**
 * The channels the application wants, with the last `seq` delivered on
 * each, so that after anything that may have lost messages (a reconnect,
 * a `slow_consumer` notice) the channel is subscribed again with `since`
 * and the handlers see every message once, in order (PROTOCOL.md §11).
 */
import type { TimerHandle } from "./clock.js";
import type { Request } from "./request.js";
import type { AckFrame, MessageFrame, MessageHandler, SubscribeResult } from "./types.js";

export interface Subscription {
  readonly channel: string;
  readonly handlers: Set<MessageHandler>;
  /**
   * The position: the highest seq delivered, or the ack's `seq` (the
   * channel's position when the subscription went live), or the `since`
   * the app gave. A resubscribe asks `since` this.
   */
  lastSeq?: number;
  /** The subscribe frame queued or in flight, if any. */
  request?: Request;
  /** Settles on the first ack (or failure) of the app's subscribe. */
  ready: Promise<SubscribeResult>;
  /** Acked on the current connection (the server would deliver to it). */
  live: boolean;
  /**
   * Joined by the broker (a connect hook's `channels`, `server-channels.ts`),
   * not subscribed by the client: the next `welcome` says whether it still is.
   */
  server?: boolean;
  /** A resubscribe the backend could not answer, asked again at this timer (`hook_unavailable`). */
  retry?: TimerHandle;
  /**
   * Set while a recovering resubscribe is on its way on a live socket:
   * messages arriving meanwhile wait here, because the recovery that
   * follows the ack may have to come first.
   */
  held?: MessageFrame[];
}

export class Subscriptions {
  private readonly subs = new Map<string, Subscription>();

  /** @param delivered called after the handlers for each delivered message. */
  constructor(private readonly delivered: (f: MessageFrame) => void) {}

  get(channel: string): Subscription | undefined {
    return this.subs.get(channel);
  }

  add(sub: Subscription): void {
    this.subs.set(sub.channel, sub);
  }

  delete(channel: string): void {
    this.subs.delete(channel);
  }

  all(): Subscription[] {
    return [...this.subs.values()];
  }

  get size(): number {
    return this.subs.size;
  }

  /** A `message` frame: delivered, held during a recovery, or a duplicate. */
  receive(f: MessageFrame): void {
    const sub = this.subs.get(f.channel);
    if (!sub) return;
    if (sub.held) sub.held.push(f);
    else this.deliver(sub, f);
  }

  /**
   * The ack of a (re)subscribe that asked `since` (or nothing): moves the
   * position and settles what was held. Returns whether history could not
   * cover the hole, which is when the app must hear of a `gap`.
   *
   * - No `since`: live messages are exactly those above the ack's `seq`.
   * - `recovered: true`: the held messages after `since` follow the ack
   *   again, in order, so the held copies are dropped.
   * - `recovered: false`: the server sends no history; what was held is
   *   delivered and the position jumps to the ack's `seq`.
   */
  acked(sub: Subscription, since: number | undefined, ack: AckFrame): boolean {
    const held = sub.held ?? [];
    sub.held = undefined;
    const seq = typeof ack.seq === "number" ? ack.seq : undefined;
    if (since !== undefined && ack.recovered !== false && seq !== undefined) return false;
    held.sort((a, b) => a.seq - b.seq);
    for (const f of held) this.deliver(sub, f);
    if (seq !== undefined && (sub.lastSeq === undefined || seq > sub.lastSeq)) sub.lastSeq = seq;
    return since !== undefined && ack.recovered === false;
  }

  /** Delivers unless it is a duplicate (seq ≤ the position). */
  private deliver(sub: Subscription, f: MessageFrame): void {
    if (sub.lastSeq !== undefined && f.seq <= sub.lastSeq) return;
    sub.lastSeq = f.seq;
    const ctx = { channel: f.channel, seq: f.seq, conflated: f.conflated === true };
    for (const handler of [...sub.handlers]) {
      try {
        handler(f.data, ctx);
      } catch (err) {
        const q = (globalThis as { queueMicrotask?: (fn: () => void) => void }).queueMicrotask;
        q?.(() => {
          throw err;
        });
      }
    }
    this.delivered(f);
  }
}
