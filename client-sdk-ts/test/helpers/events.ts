import type { TidegateClient } from "../../src/client.js";
import type { ClientEvents } from "../../src/types.js";

/**
 * Resolves with the next `event` payload matching `predicate`. The real-time
 * guard only turns a missing event into a failure with a message; it never
 * stands in for synchronisation.
 */
export function nextEvent<K extends keyof ClientEvents>(
  client: TidegateClient,
  event: K,
  predicate: (payload: ClientEvents[K]) => boolean = () => true,
  guardMs = 5000,
): Promise<ClientEvents[K]> {
  return new Promise((resolve, reject) => {
    const guard = setTimeout(() => {
      off();
      reject(new Error(`no ${String(event)} event within ${guardMs} ms`));
    }, guardMs);
    const off = client.on(event, (payload) => {
      if (!predicate(payload)) return;
      clearTimeout(guard);
      off();
      resolve(payload);
    });
  });
}

export function nextState(client: TidegateClient, state: string, guardMs?: number) {
  return nextEvent(client, "state", (s) => s.state === state, guardMs);
}

/** Resolves once `check()` is true, re-checking after every event loop turn. */
export async function until(check: () => boolean, what: string, guardMs = 5000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    if (Date.now() - start > guardMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Settles a promise into a plain result, so tests can assert on rejections. */
export async function settle<T>(
  p: Promise<T>,
): Promise<{ ok: true; value: T } | { ok: false; error: any }> {
  try {
    return { ok: true, value: await p };
  } catch (error) {
    return { ok: false, error };
  }
}
