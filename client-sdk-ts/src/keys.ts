/**
 * Idempotency keys (PROTOCOL.md §17): every publish carries one, so a
 * publish whose answer was lost can be sent again and the broker answers
 * it with the first `seq` instead of publishing it twice.
 */

/** 1–64 bytes of `[A-Za-z0-9_.:-]`: the broker's rule for a key. */
const KEY_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Whether `key` is one the broker accepts. */
export function validKey(key: unknown): key is string {
  return typeof key === "string" && KEY_PATTERN.test(key);
}

interface CryptoLike {
  getRandomValues<T extends Uint8Array>(array: T): T;
}

let counter = 0;

/**
 * A fresh key: 128 random bits as 32 hex digits. `crypto.getRandomValues`
 * is used because, unlike `crypto.randomUUID`, browsers offer it outside
 * secure contexts too (a page served over plain http); Node 20 has it as a
 * global. Without it (an old embedded runtime) the key mixes the time, a
 * per-process counter and `Math.random`, still unique per client.
 */
export function generateKey(): string {
  const crypto = (globalThis as { crypto?: CryptoLike }).crypto;
  if (crypto && typeof crypto.getRandomValues === "function") {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    let out = "";
    for (const b of bytes) out += b.toString(16).padStart(2, "0");
    return out;
  }
  counter = (counter + 1) % 0x100000000;
  const rand = () => Math.floor(Math.random() * 0x100000000).toString(16).padStart(8, "0");
  return `${Date.now().toString(16)}.${counter.toString(16)}.${rand()}${rand()}`;
}
