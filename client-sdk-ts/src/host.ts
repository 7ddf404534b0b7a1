/**
 * What the frame handler (`frames.ts`) and the close path (`in-flight.ts`)
 * use of a connection. `Connection` has it (checked where it hands itself
 * to them; not declared with `implements`, since these members are
 * internal and left out of the published types); the two helpers depend
 * on this, not on `connection.ts`, so the connection's module imports them
 * and not the other way round.
 */
import type { Clock } from "./clock.js";
import type { Pacer } from "./pacer.js";
import type { Request } from "./request.js";
import type { Subscriptions } from "./subscriptions.js";
import type { ClientEvents, ExpiryFrame, WelcomeFrame } from "./types.js";

export interface ConnectionHost {
  readonly clock: Clock;
  readonly pacer: Pacer;
  readonly subs: Subscriptions;
  /** Requests sent and not yet answered, by id. */
  readonly inFlight: Map<number, Request>;
  readonly maxRetries: number;
  /** The last `retryAfterMs` an error frame suggested (capped). */
  retryAfterHintMs?: number;
  /** An `account_rate_limited` error frame was seen (its close is not reported again). */
  accountLimitedSeen: boolean;
  onWelcome(welcome: WelcomeFrame): void;
  onExpiry(f: ExpiryFrame): void;
  onPresenceFrame(frame: { type: string; channel: string }): void;
  /** A server-suggested wait, capped at `maxRetryAfterMs`. */
  capRetry(ms: number): number;
  /** Forget a subscription the server ended (no resubscribe). */
  forget(channel: string): void;
  /** Recover every subscription from its last `seq` (after a drop episode). */
  recoverAll(): void;
  fire<K extends keyof ClientEvents>(event: K, payload: ClientEvents[K]): void;
}
