/**
 * What the exactly-once tests (PROTOCOL.md §17) share, in Node and in the
 * browser: a broker in cluster mode on a real Redis with limits a burst of
 * publishes does not reach, a tally of what a subscriber saw, and a cutter
 * that drops the publisher's connections while the publishes are flowing.
 */
import assert from "node:assert/strict";
import { brokerConfig, merge, TEST_BASE } from "./broker.js";

/** A broker on `redisUrl` (cluster mode "redis"), keys under a prefix of its own. */
export function exactlyOnceConfig(redisUrl: string, prefix: string): string {
  return brokerConfig(
    merge(TEST_BASE, {
      node: { id: `eo-${prefix}` },
      cluster: {
        mode: "redis",
        redis_url: redisUrl,
        key_prefix: `eo${prefix}${process.pid}:`,
        lease_ms: 1000,
        secret: "sdk-exactly-once-secret-0123",
      },
      // The publisher's pacing spreads a burst over about half a second
      // (900/s), so the cuts land while publishes flow, not after the
      // whole burst was written.
      "plans.free": {
        messages_per_sec: 1000,
        burst: 100,
        account_messages_per_sec: 20000,
        account_burst: 20000,
        max_connections: 50,
      },
      history: { size: 5000 },
    }),
  );
}

/** Resolves once the broker's bridge to Redis is up (it publishes through it). */
export async function bridgeUp(httpUrl: string): Promise<void> {
  for (;;) {
    const text = await (await fetch(`${httpUrl}/metrics`)).text();
    if (/^tidegate_cluster_bridge_up 1$/m.test(text)) return;
    await new Promise((r) => setImmediate(r));
  }
}

/** What one subscriber saw: each `i` with the seqs it came with. */
export class Tally {
  readonly seen = new Map<number, number[]>();
  private ended = false;

  /** A message handler: `{i}` messages are counted, `{end: true}` is the barrier. */
  readonly handler = (data: unknown, ctx: { seq: number }): void => {
    const d = data as { i?: number; end?: boolean };
    if (d.end) this.ended = true;
    else if (typeof d.i === "number") this.seen.set(d.i, [...(this.seen.get(d.i) ?? []), ctx.seq]);
  };

  get distinct(): number {
    return this.seen.size;
  }

  get done(): boolean {
    return this.ended;
  }

  /** Every `i` in [0, n) exactly once, with the seq its publish resolved with. */
  assertOnce(n: number, seqs: number[], who: string): void {
    const twice = [...this.seen].filter(([, s]) => s.length > 1);
    assert.deepEqual(twice, [], `${who}: no message twice`);
    const missing = Array.from({ length: n }, (_, i) => i).filter((i) => !this.seen.has(i));
    assert.deepEqual(missing, [], `${who}: no message lost`);
    for (let i = 0; i < n; i += 1) {
      assert.equal(this.seen.get(i)![0], seqs[i], `${who}: message ${i} came with its publish's seq`);
    }
  }
}

/** The outcome of one `publish()`, as a page or Node reports it. */
export type Outcome =
  | { ok: true; seq: number; attempts: number; key: string; duplicate?: boolean }
  | { ok: false; code: string; message: string };

/** Every publish resolved, each with its own seq; returns the seqs by `i`. */
export function assertAllResolved(outcomes: Outcome[]): number[] {
  const failed = outcomes.filter((o) => !o.ok);
  assert.deepEqual(failed, [], "every publish() resolved");
  const seqs = outcomes.map((o) => (o as { seq: number }).seq);
  assert.equal(new Set(seqs).size, seqs.length, "one seq per publish");
  const keys = outcomes.map((o) => (o as { key: string }).key);
  assert.equal(new Set(keys).size, keys.length, "one key per publish");
  return seqs;
}

/**
 * Cuts through `drop()` each time the watching subscriber has seen `every`
 * more messages, `times` times at most, waiting for `ready()` (the
 * publisher is connected again) before each: the publisher's connection
 * goes while its publishes are in flight (the broker has just published
 * one of them, so the ones after it, and their acks, are on the wire).
 */
export function cutter(drop: () => void, every: number, times: number, ready: () => boolean = () => true) {
  let seen = 0;
  let cuts = 0;
  let nextAt = every;
  return {
    get cuts() {
      return cuts;
    },
    /** Call from the watching subscriber's handler for every message. */
    saw(): void {
      seen += 1;
      if (seen >= nextAt && cuts < times && ready()) {
        cuts += 1;
        nextAt = seen + every;
        drop();
      }
    },
  };
}
