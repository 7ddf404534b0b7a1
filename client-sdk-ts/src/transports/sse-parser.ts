/**
 * The `text/event-stream` format (WHATWG HTML §9.2) as the broker writes
 * it (PROTOCOL.md §14): blocks of `field: value` lines ended by a blank
 * line, `data:` lines joined with "\n", `:` comments (the broker's
 * `: ping`) skipped. Unlike `EventSource`, a block with only an `id:` is
 * returned too: the broker marks where a live subscription started that
 * way, and the SSE transport answers the subscribe from it.
 */

/** One block of the stream (fields absent when the block had none). */
export interface SseBlock {
  event?: string;
  data?: string;
  id?: string;
  retry?: number;
}

/**
 * Incremental parser: feed decoded text as it arrives, get the complete
 * blocks. Holds at most the unfinished block and line (bounded by what the
 * broker writes between blank lines: one event).
 */
export class SseParser {
  private line = "";
  private block: SseBlock = {};
  private dataLines: string[] = [];
  private sawField = false;
  /** A "\r" ended the last chunk: a "\n" starting the next one belongs to it. */
  private pendingCr = false;

  push(text: string): SseBlock[] {
    const out: SseBlock[] = [];
    let start = 0;
    let i = 0;
    if (this.pendingCr && text.startsWith("\n")) {
      start = i = 1;
    }
    this.pendingCr = false;
    for (; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.line += text.slice(start, i);
      this.endLine(out);
      if (c === 13) {
        if (i + 1 === text.length) this.pendingCr = true;
        else if (text.charCodeAt(i + 1) === 10) i += 1;
      }
      start = i + 1;
    }
    this.line += text.slice(start);
    return out;
  }

  private endLine(out: SseBlock[]): void {
    const line = this.line;
    this.line = "";
    if (line === "") {
      if (this.sawField) {
        if (this.dataLines.length > 0) this.block.data = this.dataLines.join("\n");
        out.push(this.block);
      }
      this.block = {};
      this.dataLines = [];
      this.sawField = false;
      return;
    }
    if (line.startsWith(":")) return; // a comment (`: ping`)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.block.event = value;
        break;
      case "data":
        this.dataLines.push(value);
        break;
      case "id":
        if (value.includes("\0")) return;
        this.block.id = value;
        break;
      case "retry":
        if (!/^\d+$/.test(value)) return;
        this.block.retry = Number(value);
        break;
      default:
        return; // unknown fields are ignored, as EventSource does
    }
    this.sawField = true;
  }
}

/** The longest position token (PROTOCOL.md §14). */
export const MAX_POSITION_BYTES = 4096;

/** The compact form's start (`broker/src/protocol/position.rs`). */
const COMPACT_PREFIX = "~2.";
/** The unreleased first compact form: nine digits of `seq + 1` a field. */
const V1_PREFIX = "~1.";
const HASH_DIGITS = 6;
/** A `~2.` field: 48 bits, `(seq mod M) + 1` (zero: no `seq` yet). */
const FIELD_DIGITS = 8;
const V1_DIGITS = 9;
const HEAD = COMPACT_PREFIX.length + HASH_DIGITS;
const DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/** `M`, the modulus of a field's residue: 2^48 − 1. */
const MODULUS = 2 ** 48 - 1;
/** How far above the clock (µs) a broker reads a `seq` back exactly: 2^40. */
const SLACK = 2 ** 40;

/**
 * What the SDK knows of a channel's place in a stream: its whole `seq`
 * (a number: from a message, a subscribe's `since`, or a position that
 * spells it), or the eight-digit field of a compact position (a string),
 * kept verbatim. A field is the `seq`'s residue, which only the broker
 * turns back into a `seq` (against its clock); the SDK writes it back as
 * it came, so a reopen needs no clock (a client's may be wrong by days).
 */
export type PositionEntry = number | string;

/**
 * The 32-bit FNV-1a hash of a stream's channels, each followed by `\n`,
 * as the broker ties a compact position to its list (`list_hash`).
 * Channel names are ASCII (§2), so their characters are their bytes.
 */
export function listHash(channels: readonly string[]): number {
  let h = 0x811c9dc5;
  for (const c of channels) {
    for (let i = 0; i <= c.length; i++) {
      h ^= i < c.length ? c.charCodeAt(i) & 0xff : 0x0a;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h >>> 0;
}

/** `value` (a safe integer) in `n` base64url digits, big-endian. */
function digits(value: number, n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) {
    out = DIGITS[value % 64]! + out;
    value = Math.floor(value / 64);
  }
  return out;
}

/** The value of base64url digits (undefined: not digits, or not a safe integer). */
function readDigits(text: string): number | undefined {
  let v = 0;
  for (const ch of text) {
    const d = DIGITS.indexOf(ch);
    if (d < 0) return undefined;
    v = v * 64 + d;
  }
  return Number.isSafeInteger(v) ? v : undefined;
}

/** The compact field of `seq` (a safe integer): `(seq mod M) + 1` in eight digits. */
export function residueField(seq: number): string {
  return digits((seq % MODULUS) + 1, FIELD_DIGITS);
}

/**
 * The `seq` a field stands for, read against `referenceUs`, a clock in µs
 * or a `seq` the broker issued lately: the one of the residue's class in
 * the `M` values ending 2^40 above it (the broker's own rule,
 * `position::reconstruct`). Exact when the reference is at most 12.7 days
 * behind the `seq` and at most 8.9 years ahead of it. Only for reporting
 * a `seq` (a live subscribe's ack); positions are written from the field.
 */
export function reconstructSeq(field: string, referenceUs: number): number | undefined {
  const value = readDigits(field);
  if (value === undefined || value === 0 || field.length !== FIELD_DIGITS) return undefined;
  const residue = value - 1;
  const top = referenceUs + SLACK;
  const back = (((top % MODULUS) - residue) % MODULUS + MODULUS) % MODULUS;
  return top - back >= 0 ? top - back : residue;
}

/** The field `entry` writes. */
function fieldOf(entry: PositionEntry | undefined): string {
  if (entry === undefined) return digits(0, FIELD_DIGITS);
  return typeof entry === "number" ? residueField(entry) : entry;
}

/**
 * A stream position (`id:`), the last `seq` of each channel of the stream
 * (docs/protocol.md §14, `broker/src/protocol/position.rs`), in any of
 * its forms:
 *
 * - compact (what the broker writes): `~2.`, six base64url digits of
 *   {@link listHash} of the stream's channels, then eight digits per
 *   channel in the request's order, `(seq mod (2^48 − 1)) + 1` (zero: no
 *   `seq` yet), each kept as its field (a string, {@link PositionEntry}).
 *   The names are the request's, so `channels` must be the list the
 *   stream was opened with;
 * - `~1.` (unreleased builds): nine digits of `seq + 1` per channel;
 * - named (earlier brokers): base64url of `channel seq` pairs joined by
 *   `,`.
 *
 * Opaque to `EventSource` readers; the SDK reads it to answer subscribes
 * and writes one ({@link encodePosition}) to resume the channels it
 * already had when the set changes. Only channels with a `seq` are in the
 * map: a number where the token spells it, else the field. Undefined when
 * it is not such a token (or not of `channels`).
 */
export function decodePosition(
  token: string,
  channels: readonly string[],
): Map<string, PositionEntry> | undefined {
  const map = new Map<string, PositionEntry>();
  if (token === "") return map;
  if (token.startsWith("~")) {
    const width = token.startsWith(COMPACT_PREFIX)
      ? FIELD_DIGITS
      : token.startsWith(V1_PREFIX)
        ? V1_DIGITS
        : undefined;
    const fields = token.slice(HEAD);
    const hash = readDigits(token.slice(COMPACT_PREFIX.length, HEAD));
    if (
      width === undefined ||
      token.length < HEAD ||
      hash !== listHash(channels) ||
      fields.length !== width * channels.length
    ) {
      return undefined;
    }
    for (let i = 0; i < channels.length; i++) {
      const field = fields.slice(i * width, (i + 1) * width);
      const value = readDigits(field);
      if (value === undefined) return undefined;
      if (value === 0) continue;
      map.set(channels[i]!, width === FIELD_DIGITS ? field : value - 1);
    }
    return map;
  }
  const atob = (globalThis as unknown as { atob?: (s: string) => string }).atob;
  if (!atob) return undefined;
  let text: string;
  try {
    const b64 = token.replace(/-/g, "+").replace(/_/g, "/");
    text = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
  } catch {
    return undefined;
  }
  for (const pair of text.split(",")) {
    const space = pair.lastIndexOf(" ");
    const seq = Number(pair.slice(space + 1));
    if (space <= 0 || !/^\d+$/.test(pair.slice(space + 1)) || !Number.isSafeInteger(seq)) {
      return undefined;
    }
    map.set(pair.slice(0, space), seq);
  }
  return map;
}

/**
 * A position for a stream of `channels` (in the order of its request),
 * each at its entry in `seqs` (a channel without one starts live). The
 * named form when every entry is a whole `seq` and it fits
 * {@link MAX_POSITION_BYTES}: brokers of every build read it, so a reopen
 * during a rolling upgrade resumes on either; else the compact form,
 * which holds any stream the plans allow (its size does not depend on the
 * names) and writes a field it got from the broker verbatim.
 */
export function encodePosition(
  channels: readonly string[],
  seqs: Map<string, PositionEntry>,
): string {
  const kept = channels.filter((c) => seqs.has(c));
  if (kept.every((c) => typeof seqs.get(c) === "number")) {
    const btoa = (globalThis as unknown as { btoa: (s: string) => string }).btoa;
    const pairs = kept.map((c) => `${c} ${seqs.get(c)!}`);
    const named = btoa(pairs.join(",")).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    if (named.length <= MAX_POSITION_BYTES) return named;
  }
  return compactPosition(channels, seqs);
}

/** The compact form of {@link encodePosition}. */
export function compactPosition(
  channels: readonly string[],
  seqs: Map<string, PositionEntry>,
): string {
  let token = COMPACT_PREFIX + digits(listHash(channels), HASH_DIGITS);
  for (const c of channels) token += fieldOf(seqs.get(c));
  return token;
}
