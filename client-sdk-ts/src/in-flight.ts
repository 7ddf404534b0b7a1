/**
 * What happens to the requests in flight and queued when the socket goes
 * away (the connection half calls it on every close but its own).
 */
import { TidegateError } from "./errors.js";
import { keyOf, type Request } from "./request.js";
import type { ConnectionHost } from "./host.js";

/**
 * The socket is gone. Publishes in flight are kept and go out again,
 * with their keys, after the reconnect, ahead of the queued ones and all
 * in the order they were made (so each channel keeps its order): the
 * broker answers one it already published with the first `seq` (§17).
 * After a "fix" close (1002, 1007, 1009) the frame in flight would be
 * refused again, so publishes in flight reject `disconnected` instead.
 * Budget and presence reads and RPCs reject `disconnected` (an RPC is
 * never sent twice: the backend may have run it); subscribes wait for the
 * next connection.
 */
export function failInFlight(c: ConnectionHost, closeCode: number, fix: boolean): void {
  const inFlight = [...c.inFlight.values()];
  c.inFlight.clear();
  const queued = c.pacer.drain((r) => r.kind !== "publish");
  const resend: Request[] = [];
  for (const req of [...inFlight, ...queued]) {
    if (req.kind === "unsubscribe") req.resolve(undefined);
    else if (req.kind === "subscribe") {
      if (req.internal) dropInternal(c, req);
    } else if (req.kind === "publish" && !fix) resend.push(req);
    else {
      req.reject(
        new TidegateError("disconnected", `the connection closed (${closeCode}) before the answer`, {
          id: req.id,
          closeCode,
          channel: req.channel,
          attempts: req.attempts,
          key: keyOf(req),
        }),
      );
    }
  }
  c.pacer.requeueFront([...resend, ...c.pacer.drain(() => true)]);
  for (const sub of c.subs.all()) sub.live = false;
}

/** Forget a resubscribe silently: the next welcome makes a new one. */
function dropInternal(c: ConnectionHost, req: Request): void {
  req.done = true;
  c.clock.clearTimeout(req.timer);
  const sub = c.subs.get(req.channel!);
  if (sub?.request === req) sub.request = undefined;
}
