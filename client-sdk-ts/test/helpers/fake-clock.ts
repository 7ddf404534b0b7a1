import type { Clock, TimerHandle } from "../../src/clock.js";

interface Timer {
  id: number;
  at: number;
  fn: () => void;
}

/** A clock that only moves when the test says so. */
export class FakeClock implements Clock {
  private t = 0;
  private nextId = 1;
  private timers: Timer[] = [];

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = { id: this.nextId++, at: this.t + Math.max(0, ms), fn };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }

  /** Moves time forward, running every timer that falls due, in order. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      const due = this.timers
        .filter((t) => t.at <= end)
        .sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.t = Math.max(this.t, due.at);
      due.fn();
    }
    this.t = end;
  }

  /** Timers still waiting. */
  get pending(): number {
    return this.timers.length;
  }
}

/** A random source that returns the given values in turn (then the last one). */
export function sequenceRandom(...values: number[]): () => number {
  let i = 0;
  return () => values[Math.min(i++, values.length - 1)]!;
}
