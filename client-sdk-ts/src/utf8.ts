/** UTF-8 length of a string (what the server's payload limit counts). */
export function byteLength(text: string): number {
  const Encoder = (globalThis as { TextEncoder?: new () => { encode(s: string): Uint8Array } })
    .TextEncoder;
  if (Encoder) return new Encoder().encode(text).length;
  return text.length * 3;
}
