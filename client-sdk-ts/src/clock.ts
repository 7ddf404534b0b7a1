/** A source of time and timers, injectable so tests never sleep. */
export type TimerHandle = unknown;

export interface Clock {
  /** Milliseconds, monotonic enough for pacing. */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

interface TimerGlobals {
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
  performance?: { now(): number };
}

const g = globalThis as unknown as TimerGlobals;

/** The runtime's clock (browser or Node). */
export const realClock: Clock = {
  now: () => (g.performance ? g.performance.now() : Date.now()),
  setTimeout: (fn, ms) => g.setTimeout(fn, ms),
  clearTimeout: (handle) => g.clearTimeout(handle),
};
