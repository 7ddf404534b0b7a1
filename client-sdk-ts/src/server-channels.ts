/**
 * Server-side subscriptions (PROTOCOL.md §15): a connect hook's answer may
 * name `channels` the broker joins at the handshake, listed in `welcome`
 * as `"channels":[{"channel","seq"}]`. The SDK keeps each as an ordinary
 * subscription (marked `server`): `client.subscription(channel)` returns
 * it, its messages reach `subscribe()` handlers added later and the
 * `message` event, and it is not subscribed again by the client after a
 * reconnect — the next `welcome` lists it again (the hook decides again).
 *
 * A reconnect cannot ask history for a server-side channel (`since` is a
 * subscribe's), so when the new `welcome`'s position is past the last
 * message delivered, the messages between are reported as a `gap`.
 */
import type { Subscription, Subscriptions } from "./subscriptions.js";
import type { GapEvent, ServerChannel, WelcomeFrame } from "./types.js";

/**
 * The well-formed entries of `welcome.channels`, once each (a bare string
 * is a channel without a position). Bounded by the frame itself, which the
 * broker bounds by the connection's subscription cap.
 */
export function serverChannels(welcome: WelcomeFrame): ServerChannel[] {
  if (!Array.isArray(welcome.channels)) return [];
  const seen = new Map<string, ServerChannel>();
  for (const entry of welcome.channels as unknown[]) {
    const c =
      typeof entry === "string"
        ? { channel: entry }
        : entry && typeof entry === "object" && typeof (entry as ServerChannel).channel === "string"
          ? (entry as ServerChannel)
          : undefined;
    if (!c || c.channel.length === 0 || seen.has(c.channel)) continue;
    seen.set(c.channel, typeof c.seq === "number" ? { channel: c.channel, seq: c.seq } : { channel: c.channel });
  }
  return [...seen.values()];
}

export interface Joined {
  /** The channels the broker joined: the client does not subscribe to them itself. */
  channels: Set<string>;
  /** Kept subscriptions whose messages between their position and the welcome's were lost. */
  gaps: GapEvent[];
  /** Subscribe requests of the app for a channel the broker joined: settle them with this position. */
  settled: Array<{ sub: Subscription; seq?: number }>;
}

/**
 * Makes `listed` live subscriptions in `subs` (new ones with no handler),
 * moves their position to the welcome's, and drops server-side
 * subscriptions that are no longer listed and have no handler (one the app
 * added a handler to is subscribed again by the client, like its own).
 */
export function joinServerChannels(subs: Subscriptions, listed: ServerChannel[]): Joined {
  const joined: Joined = { channels: new Set(), gaps: [], settled: [] };
  for (const { channel, seq } of listed) {
    joined.channels.add(channel);
    let sub = subs.get(channel);
    if (!sub) {
      const result = seq === undefined ? { channel } : { channel, seq };
      sub = { channel, handlers: new Set(), lastSeq: seq, ready: Promise.resolve(result), live: true };
      subs.add(sub);
    } else if (seq !== undefined) {
      if (sub.lastSeq !== undefined && seq > sub.lastSeq) {
        joined.gaps.push({ channel, since: sub.lastSeq, seq });
      }
      if (sub.lastSeq === undefined || seq > sub.lastSeq) sub.lastSeq = seq;
    }
    sub.server = true;
    sub.live = true;
    sub.held = undefined;
    if (sub.request && !sub.request.done) joined.settled.push({ sub, seq });
  }
  for (const sub of subs.all()) {
    if (!sub.server || joined.channels.has(sub.channel)) continue;
    if (sub.handlers.size === 0) subs.delete(sub.channel);
    else sub.server = false;
  }
  return joined;
}
