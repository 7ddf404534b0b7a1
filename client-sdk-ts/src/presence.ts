/**
 * Presence (PROTOCOL.md §13): who is in a channel.
 *
 * - `client.presence(channel)` / `client.presenceStats(channel)` read it
 *   (the broker prices `presence` per started 100 of `limit`).
 * - A subscription made with `{ presence: true }` keeps a member set,
 *   `client.subscription(channel).members`: read after every (re)subscribe
 *   ack, then kept current from the channel's `presence_diff` frames.
 *   Each change fires a `join` or `leave` event, including the ones a
 *   re-read after a reconnect finds were missed meanwhile (and after a
 *   spell of counts-only `presence_stats`, when the member list is read
 *   again).
 */
import type { TidegateError } from "./errors.js";

/** One subscribed connection of a presence channel. */
export interface Member {
  user: string;
  connId: string;
  /** The token's `info` claim. */
  info?: Record<string, unknown>;
}

export interface PresenceCounts {
  users: number;
  connections: number;
}

/** The answer to `presence()`. */
export interface PresenceResult extends PresenceCounts {
  channel: string;
  /** Sorted by user then connId; at most `limit`. */
  members: Member[];
  /** The node answered from its own members only (Redis away). */
  partial?: boolean;
}

export interface PresenceStatsResult extends PresenceCounts {
  channel: string;
  partial?: boolean;
}

export interface PresenceDiffFrame {
  type: "presence_diff";
  channel: string;
  joins: Member[];
  leaves: Member[];
}

/** A `join` or `leave` event. */
export interface MemberEvent {
  channel: string;
  member: Member;
}

/** The presence side of a subscription: its current members. */
export interface PresenceSubscription {
  readonly channel: string;
  /** connId → member, kept current. */
  readonly members: ReadonlyMap<string, Member>;
  presence(options?: { limit?: number }): Promise<PresenceResult>;
  presenceStats(): Promise<PresenceStatsResult>;
}

/**
 * What `client.subscription(channel)` returns: any subscription, the
 * client's or one the broker joined (§15), with its presence side.
 */
export interface ChannelSubscription extends PresenceSubscription {
  /** The position: the highest `seq` delivered, or where it went live. */
  readonly seq?: number;
  /** Joined by the broker at the handshake (a connect hook's `channels`), not by `subscribe()`. */
  readonly server: boolean;
  /** Acked (or joined) on the current connection. */
  readonly live: boolean;
}

/** What the tracker needs of the client. */
export interface PresenceHost {
  readPresence(channel: string, limit: number): Promise<PresenceResult>;
  readPresenceStats(channel: string): Promise<PresenceStatsResult>;
  firePresence(event: "join" | "leave", e: MemberEvent): void;
  firePresenceStats(e: PresenceStatsResult): void;
  firePresenceError(e: TidegateError): void;
}

/** The largest read, which a member set asks for. */
export const PRESENCE_MAX_LIMIT = 1000;

class Tracked implements PresenceSubscription {
  readonly members = new Map<string, Member>();
  /** Counts-only frames came: the list is stale until read again. */
  stale = false;
  /** Bumped per read, so an older answer never overwrites a newer one. */
  reads = 0;

  constructor(
    readonly channel: string,
    private readonly host: PresenceHost,
  ) {}

  presence(options: { limit?: number } = {}): Promise<PresenceResult> {
    return this.host.readPresence(this.channel, options.limit ?? 100);
  }

  presenceStats(): Promise<PresenceStatsResult> {
    return this.host.readPresenceStats(this.channel);
  }
}

/** Member sets of the subscriptions that asked for one. */
export class PresenceTracker {
  private readonly tracked = new Map<string, Tracked>();

  constructor(private readonly host: PresenceHost) {}

  track(channel: string): PresenceSubscription {
    let t = this.tracked.get(channel);
    if (!t) {
      t = new Tracked(channel, this.host);
      this.tracked.set(channel, t);
    }
    return t;
  }

  get(channel: string): PresenceSubscription | undefined {
    return this.tracked.get(channel);
  }

  forget(channel: string): void {
    this.tracked.delete(channel);
  }

  /**
   * A (re)subscribe was acked: read the members and fire what changed
   * since the set was last right (nothing on the first read... except
   * every member, which the app sees as joins).
   */
  acked(channel: string): void {
    const t = this.tracked.get(channel);
    if (t) void this.reread(t);
  }

  private async reread(t: Tracked): Promise<void> {
    const n = ++t.reads;
    let r: PresenceResult;
    try {
      r = await this.host.readPresence(t.channel, PRESENCE_MAX_LIMIT);
    } catch (e) {
      this.host.firePresenceError(e as TidegateError);
      return;
    }
    if (n !== t.reads || this.tracked.get(t.channel) !== t) return;
    t.stale = false;
    const now = new Map(r.members.map((m) => [m.connId, m]));
    for (const [id, m] of [...t.members]) {
      if (!now.has(id)) {
        t.members.delete(id);
        this.host.firePresence("leave", { channel: t.channel, member: m });
      }
    }
    for (const [id, m] of now) {
      if (!t.members.has(id)) {
        t.members.set(id, m);
        this.host.firePresence("join", { channel: t.channel, member: m });
      }
    }
  }

  /** A `presence_diff` frame. */
  diff(f: PresenceDiffFrame): void {
    const t = this.tracked.get(f.channel);
    if (!t) return;
    if (t.stale) {
      // Counts mode ended: the diff is only the last window's changes.
      void this.reread(t);
      return;
    }
    for (const m of f.leaves ?? []) {
      if (t.members.delete(m.connId)) this.host.firePresence("leave", { channel: t.channel, member: m });
    }
    for (const m of f.joins ?? []) {
      if (!t.members.has(m.connId)) {
        t.members.set(m.connId, m);
        this.host.firePresence("join", { channel: t.channel, member: m });
      }
    }
  }

  /** An unsolicited `presence_stats` frame (above the diff threshold). */
  stats(f: PresenceStatsResult): void {
    const t = this.tracked.get(f.channel);
    if (t) t.stale = true;
    this.host.firePresenceStats(f);
  }
}
