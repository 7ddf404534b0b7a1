/**
 * Calls to the application's backend over the socket (PROTOCOL.md §15,
 * the `rpc` event): `client.rpc(method, data)` sends
 * `{"type":"rpc","method","data","id"}`; the broker prices it (cost-table
 * key `rpc`, 1 unit by default), asks the backend's hook and answers
 * `{"type":"rpc","id","data"}`, or an `error` naming the id (the backend's
 * own code, `hook_unavailable`, `unknown_method` when no hook answers
 * `rpc`, or a limiter's refusal).
 *
 * An RPC is not idempotent: the SDK never sends one twice on its own. One
 * in flight when the socket closes rejects `disconnected`, because the
 * backend may or may not have run it; the app decides whether to call
 * again. Only a frame the broker dropped before pricing it (`rate_limited`
 * with its id: it never reached the backend) is sent again, like any
 * dropped frame.
 */
import { TidegateError } from "./errors.js";
import { byteLength } from "./utf8.js";
import type { Json, RpcCallFrame } from "./types.js";

/** The broker's answer to an `rpc` frame. */
export interface RpcReplyFrame {
  type: "rpc";
  id: number | string;
  /** The backend's `result.data` (null when the hook failed open, `on_error = "allow"`). */
  data?: Json;
}

export interface RpcOptions {
  /** Reject `timeout` after this long (default: the client's `timeoutMs`). */
  timeoutMs?: number;
}

/** Longest method name, in UTF-8 bytes (the broker refuses longer ones with `bad_request`). */
export const MAX_RPC_METHOD_BYTES = 128;

/**
 * The frame of one call, without its `id` (added when it is written), or
 * the `bad_request` error for a method the broker would refuse.
 */
export function rpcFrame(method: unknown, data: Json | undefined): Omit<RpcCallFrame, "id"> | TidegateError {
  if (typeof method !== "string" || method.length === 0 || byteLength(method) > MAX_RPC_METHOD_BYTES) {
    return new TidegateError("bad_request", `an rpc method is a string of 1 to ${MAX_RPC_METHOD_BYTES} bytes`);
  }
  return { type: "rpc", method, data: data ?? null };
}

/** The reply's data (null when the broker sent none). */
export function rpcResult(frame: RpcReplyFrame): Json {
  return frame.data === undefined ? null : frame.data;
}
