/**
 * The `exp` claim of a JWT in ms since the epoch, or undefined when the token
 * cannot be read. Only used to ask `getToken()` for a fresh token before
 * connecting with a stale one; the server is the judge of validity.
 */
export function tokenExpiryMs(token: string): number | undefined {
  const parts = token.split(".");
  if (parts.length !== 3) return undefined;
  try {
    const b64 = parts[1]!.replace(/-/g, "+").replace(/_/g, "/");
    const padded = b64 + "=".repeat((4 - (b64.length % 4)) % 4);
    const decode = (globalThis as unknown as { atob?: (s: string) => string }).atob;
    if (!decode) return undefined;
    const claims = JSON.parse(decode(padded)) as { exp?: unknown };
    return typeof claims.exp === "number" ? claims.exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** Whether the token's `exp` is within `marginMs` of `nowMs` (false when unknown). */
export function tokenExpired(token: string, nowMs: number, marginMs = 5000): boolean {
  const exp = tokenExpiryMs(token);
  return exp !== undefined && exp - marginMs <= nowMs;
}
