/**
 * The channels the application wants, with the last `seq` seen on each, so
 * a reconnect can resubscribe with `since` and drop what was already
 * delivered (no duplicates, in order).
 */
import type { Request } from "./request.js";
import type { MessageHandler, SubscribeResult, Json } from "./types.js";

export interface Subscription {
  readonly channel: string;
  readonly handlers: Set<MessageHandler>;
  /** The highest seq delivered (or the `since` the app gave). */
  lastSeq?: number;
  /** The subscribe frame queued or in flight, if any. */
  request?: Request;
  /** Settles on the first ack (or failure) of the app's subscribe. */
  ready: Promise<SubscribeResult>;
  /** Acked on the current connection (the server would deliver to it). */
  live: boolean;
}

export class Subscriptions {
  private readonly subs = new Map<string, Subscription>();

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

  /**
   * Delivers a message to its channel's handlers unless it is a duplicate
   * (seq ≤ last seen). Returns whether it was delivered.
   */
  deliver(channel: string, seq: number, data: Json): boolean {
    const sub = this.subs.get(channel);
    if (!sub) return false;
    if (sub.lastSeq !== undefined && seq <= sub.lastSeq) return false;
    sub.lastSeq = seq;
    for (const handler of [...sub.handlers]) {
      try {
        handler(data, { channel, seq });
      } catch (err) {
        const q = (globalThis as { queueMicrotask?: (fn: () => void) => void }).queueMicrotask;
        q?.(() => {
          throw err;
        });
      }
    }
    return true;
  }
}
