import type { TimerHandle } from "./clock.js";
import type { TidegateError } from "./errors.js";
import type { ClientFrame } from "./protocol.js";

type WithoutId<F> = F extends unknown ? Omit<F, "id"> : never;

/** A client frame without its `id`, which each send adds. */
export type UnsentFrame = WithoutId<ClientFrame>;

export type RequestKind =
  | "publish"
  | "subscribe"
  | "unsubscribe"
  | "budget"
  | "refresh"
  | "presence"
  | "presence_stats"
  | "rpc";

/**
 * One frame with an `id`, from the call that made it to its one answer.
 * It settles exactly once: `settle` clears the timer and marks it done.
 */
export interface Request {
  readonly id: number;
  readonly kind: RequestKind;
  /** The frame without `id`; `since` is filled in at send time for subscribes. */
  readonly frame: UnsentFrame;
  readonly cost: number;
  readonly channel?: string;
  /** Made by the client itself (a resubscribe), not by an application call. */
  readonly internal: boolean;
  /** How many times it was written to a socket. */
  attempts: number;
  timer?: TimerHandle;
  done: boolean;
  resolve(value: unknown): void;
  reject(error: TidegateError): void;
}

/** A publish's idempotency key (§17); undefined for other requests. */
export function keyOf(req: { frame: UnsentFrame }): string | undefined {
  return req.frame.type === "publish" ? req.frame.key : undefined;
}
