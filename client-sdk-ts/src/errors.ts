import { isTemporary, type AnyErrorCode } from "./codes.js";

export interface TidegateErrorDetails {
  /** The request id the error answers, when it answers one. */
  id?: number | string;
  retryAfterMs?: number;
  /** WebSocket close code, for `disconnected` errors and close-related errors. */
  closeCode?: number;
  /** HTTP status of a refused handshake. */
  status?: number;
  /** How many times the request was sent. */
  attempts?: number;
  channel?: string;
  /** The publish's idempotency key (§17): publishing again with it within the window cannot publish twice. */
  key?: string;
  cause?: unknown;
}

/** Every rejected promise and every `error` event carries one of these. */
export class TidegateError extends Error {
  readonly code: AnyErrorCode;
  /** Whether the same operation may succeed later without change. */
  readonly temporary: boolean;
  readonly id?: number | string;
  readonly retryAfterMs?: number;
  readonly closeCode?: number;
  readonly status?: number;
  readonly attempts?: number;
  readonly channel?: string;
  /** The publish's idempotency key, on errors about a publish. */
  readonly key?: string;

  constructor(code: AnyErrorCode, message: string, details: TidegateErrorDetails = {}) {
    super(message);
    this.name = "TidegateError";
    this.code = code;
    this.temporary = isTemporary(code);
    this.id = details.id;
    this.retryAfterMs = details.retryAfterMs;
    this.closeCode = details.closeCode;
    this.status = details.status;
    this.attempts = details.attempts;
    this.channel = details.channel;
    this.key = details.key;
    if (details.cause !== undefined) (this as { cause?: unknown }).cause = details.cause;
  }
}

/** The client was closed by the application. */
export function closedError(): TidegateError {
  return new TidegateError("closed", "the client is closed");
}

export function tokenError(cause: unknown): TidegateError {
  return new TidegateError("token_error", "getToken() failed", { cause });
}

export function tooLarge(channel: string | undefined, max: number): TidegateError {
  return new TidegateError(
    "payload_too_large",
    `the frame is larger than the connection's maxPayloadBytes (${max})`,
    { channel },
  );
}
