/**
 * Token refresh on the socket (PROTOCOL.md §2): before the token's `exp`
 * (`welcome.tokenExpiresAt`), the client asks `getToken()` for a new one
 * and sends it as a `refresh` frame, so the server does not close the
 * socket with 4001 and nothing reconnects. A pure schedule function, unit
 * tested on its own; the connection wires it (`connection.ts`).
 */

/** Refresh this long before `exp` at the latest. */
export const REFRESH_BEFORE_EXPIRY_MS = 30_000;
/** ...or at this fraction of the token's remaining life, if that is earlier. */
export const REFRESH_AT_FRACTION = 0.8;
/** Up to this fraction earlier still, at random, so that many clients given
 * tokens at the same moment do not all refresh in the same instant. */
export const REFRESH_JITTER = 0.1;
/** After a failed refresh, try again at most this often. */
export const REFRESH_RETRY_MIN_MS = 1000;

/** ...but never before this fraction of it: a token that lives less than a
 * minute is not refreshed the moment it arrives (over and over). */
export const REFRESH_NOT_BEFORE_FRACTION = 0.5;

/**
 * How long to wait before refreshing a token that expires in `remainingMs`:
 * the earlier of 80% of its remaining life and 30 s before it expires, but
 * not before half of it, minus up to 10% at random (`random` in [0, 1)).
 * Never negative.
 */
export function refreshDelay(remainingMs: number, random: () => number): number {
  if (!(remainingMs > 0)) return 0;
  const planned = Math.min(remainingMs * REFRESH_AT_FRACTION, remainingMs - REFRESH_BEFORE_EXPIRY_MS);
  const base = Math.max(remainingMs * REFRESH_NOT_BEFORE_FRACTION, planned);
  return Math.floor(base * (1 - REFRESH_JITTER * random()));
}

/**
 * After a refresh failed with `remainingMs` left on the current token: when
 * to try again (half the time left, at least a second), or undefined when
 * there is no time left for another attempt (the server will close with
 * 4001 and the client reconnects with a fresh token).
 */
export function retryDelay(remainingMs: number): number | undefined {
  if (remainingMs <= REFRESH_RETRY_MIN_MS * 2) return undefined;
  return Math.max(REFRESH_RETRY_MIN_MS, Math.floor(remainingMs / 2));
}
