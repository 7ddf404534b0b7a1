/** A minimal typed event emitter: `on` returns the function that removes the listener. */
export class Emitter<Events extends object> {
  private readonly listeners = new Map<keyof Events, Set<(payload: never) => void>>();

  on<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(listener as (payload: never) => void);
    return () => this.off(event, listener);
  }

  once<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): () => void {
    const off = this.on(event, (payload) => {
      off();
      listener(payload);
    });
    return off;
  }

  off<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): void {
    this.listeners.get(event)?.delete(listener as (payload: never) => void);
  }

  /** Calls every listener; a throwing listener does not stop the others or the client. */
  protected emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    for (const listener of [...set]) {
      try {
        (listener as (payload: Events[K]) => void)(payload);
      } catch (err) {
        reportListenerError(err);
      }
    }
  }
}

function reportListenerError(err: unknown): void {
  const g = globalThis as unknown as { queueMicrotask?: (fn: () => void) => void };
  // Rethrow outside the client's own stack so the app still sees it.
  const rethrow = () => {
    throw err;
  };
  if (g.queueMicrotask) g.queueMicrotask(rethrow);
}
