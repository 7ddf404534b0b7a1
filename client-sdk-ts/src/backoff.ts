/**
 * Exponential backoff with full jitter: a delay drawn uniformly from
 * [0, min(max, min · 2^step)). Spreading reconnects over the whole window is
 * what keeps a fleet-wide disconnect from landing every client in the same
 * second (seed 002).
 *
 * @param step   attempts already made (0 for the first retry)
 * @param min    the first window's size in ms
 * @param max    the largest window in ms
 * @param random a source of numbers in [0, 1)
 */
export function backoff(
  step: number,
  min: number,
  max: number,
  random: () => number = Math.random,
): number {
  return Math.floor(random() * backoffCeiling(step, min, max));
}

/** The window `backoff` draws from for this step: min(max, min · 2^step). */
export function backoffCeiling(step: number, min: number, max: number): number {
  const s = Math.max(0, Math.min(step, 30));
  return Math.max(0, Math.min(max, min * 2 ** s));
}
