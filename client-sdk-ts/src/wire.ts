/**
 * The JSON text of frames on a WebSocket (PROTOCOL.md §2–3): the one
 * place frames are encoded and decoded. The WebSocket transport sends
 * `encodeFrame` and hands on what `decodeFrame` reads; the client measures
 * a frame against `maxPayloadBytes` and `maxQueueBytes` with `frameBytes`,
 * the UTF-8 length of that same text, whichever transport carries it.
 */
import type { ClientFrame, ServerFrame } from "./protocol.js";
import { byteLength } from "./utf8.js";

/**
 * Each frame's text, kept while the frame object lives: the client
 * measures a frame, then the WebSocket transport sends it, and it is
 * encoded once. Frames are not changed after they are made (each send
 * makes a new one), so the text stays the frame's.
 */
const texts = new WeakMap<ClientFrame, string>();

/** The frame's JSON text, as the WebSocket sends it. */
export function encodeFrame(frame: ClientFrame): string {
  let text = texts.get(frame);
  if (text === undefined) {
    text = JSON.stringify(frame);
    texts.set(frame, text);
  }
  return text;
}

/** The UTF-8 length of the frame's JSON text (what the server's limits count). */
export function frameBytes(frame: ClientFrame): number {
  return byteLength(encodeFrame(frame));
}

/**
 * The server frame a text frame holds, or undefined when the text is not a
 * JSON object (not ours to answer: it is dropped, as it always was).
 */
export function decodeFrame(text: string): ServerFrame | undefined {
  return parseObject(text) as ServerFrame | undefined;
}

/**
 * The JSON object `text` holds (a frame, an HTTP body, an SSE event's
 * `data`), or undefined when it holds anything else or is not JSON.
 */
export function parseObject(text: string | undefined): Record<string, unknown> | undefined {
  try {
    const v = JSON.parse(text ?? "") as unknown;
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
