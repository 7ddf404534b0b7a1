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

/**
 * A stream position (`id:`): base64url (no padding) of `channel seq` pairs
 * joined by `,` (docs/protocol.md §14, `broker/src/protocol/position.rs`).
 * Opaque to `EventSource` readers; the SDK reads it to answer subscribes
 * and writes it to resume the channels it already had when the set
 * changes. Undefined when it is not such a token.
 */
export function decodePosition(token: string): Map<string, number> | undefined {
  const atob = (globalThis as unknown as { atob?: (s: string) => string }).atob;
  if (!atob) return undefined;
  const map = new Map<string, number>();
  if (token === "") return map;
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

/** The token for `positions` (see {@link decodePosition}). */
export function encodePosition(positions: Map<string, number>): string {
  const btoa = (globalThis as unknown as { btoa: (s: string) => string }).btoa;
  const text = [...positions].map(([channel, seq]) => `${channel} ${seq}`).join(",");
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
