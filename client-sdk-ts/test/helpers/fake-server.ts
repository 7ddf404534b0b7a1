/**
 * An in-process fake Tidegate on 127.0.0.1:0, built on `ws`: it speaks the
 * handshake (subprotocol, HTTP refusals with Retry-After and a JSON body)
 * and lets each test script the frames.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import type { Limits } from "../../src/types.js";

export const DEFAULT_LIMITS: Limits = {
  messagesPerSec: 20,
  burst: 20,
  maxPayloadBytes: 65536,
  maxSubscriptions: 100,
  accountMessagesPerSec: 100,
  accountBurst: 200,
  maxConnections: 8,
};

export interface Refusal {
  status: number;
  code: string;
  retryAfterSec?: number;
  retryAfterMs?: number;
}

export interface Handshake {
  protocols: string[];
  token?: string;
  refused?: Refusal;
}

type Frame = Record<string, any>;

/** Called for every frame a client sends; the default answers like a broker. */
export type FrameScript = (conn: FakeConn, frame: Frame) => void;

export class FakeConn {
  readonly frames: Frame[] = [];
  private waiters: Array<{ pred: (f: Frame) => boolean; from: number; resolve: (f: Frame) => void }> = [];
  closed: Promise<{ code: number }>;
  private seqs: Map<string, number>;

  constructor(
    readonly ws: WebSocket,
    readonly token: string | undefined,
    private readonly server: FakeServer,
  ) {
    this.seqs = server.seqs;
    this.closed = new Promise((resolve) => ws.on("close", (code) => resolve({ code })));
    ws.on("message", (raw) => {
      const frame = JSON.parse(raw.toString()) as Frame;
      this.frames.push(frame);
      const index = this.frames.length - 1;
      this.waiters = this.waiters.filter((w) => {
        if (index >= w.from && w.pred(frame)) {
          w.resolve(frame);
          return false;
        }
        return true;
      });
      this.server.script(this, frame);
    });
  }

  send(frame: Frame): void {
    this.ws.send(JSON.stringify(frame));
  }

  close(code: number, reason = ""): void {
    this.ws.close(code, reason);
  }

  /** Frames of one type, in arrival order. */
  of(type: string): Frame[] {
    return this.frames.filter((f) => f.type === type);
  }

  /** The next frame matching `pred` (including ones already received after `from`). */
  waitFor(pred: (f: Frame) => boolean, from = 0, guardMs = 5000): Promise<Frame> {
    for (let i = from; i < this.frames.length; i += 1) {
      if (pred(this.frames[i]!)) return Promise.resolve(this.frames[i]!);
    }
    return new Promise((resolve, reject) => {
      const w = { pred, from, resolve: (f: Frame) => (clearTimeout(guard), resolve(f)) };
      const guard = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        reject(new Error(`fake server: no matching frame within ${guardMs} ms`));
      }, guardMs);
      this.waiters.push(w);
    });
  }

  /**
   * Publishes `frame` as the broker would (§17: a key seen before on its
   * channel is not published again; the answer is the first `seq` with
   * `duplicate`) and returns the ack, for a script to send or to lose.
   */
  publish(frame: Frame): Frame {
    const keyed = typeof frame.key === "string" ? `${frame.channel}\u0000${frame.key}` : undefined;
    const first = keyed === undefined ? undefined : this.server.keys.get(keyed);
    if (first !== undefined) return { type: "ack", id: frame.id, seq: first, duplicate: true };
    const seq = (this.seqs.get(frame.channel) ?? 0) + 1;
    this.seqs.set(frame.channel, seq);
    this.server.published.push({ channel: frame.channel, seq, data: frame.data, key: frame.key });
    if (keyed !== undefined) this.server.keys.set(keyed, seq);
    return { type: "ack", id: frame.id, seq };
  }

  /** Answers like the broker: acks with seq, subscribe acks, budget frames. */
  answer(frame: Frame): void {
    if (frame.type === "publish") {
      this.send(this.publish(frame));
    } else if (frame.type === "subscribe") {
      const ack: Frame = { type: "ack", id: frame.id };
      if (frame.since !== undefined) ack.recovered = true;
      this.send(ack);
    } else if (frame.type === "unsubscribe") {
      this.send({ type: "ack", id: frame.id });
    } else if (frame.type === "refresh") {
      this.send({ type: "ack", id: frame.id, tokenExpiresAt: this.server.refreshedExpiresAt });
    } else if (frame.type === "budget") {
      const l = this.server.limits;
      this.send({
        type: "budget",
        id: frame.id,
        connection: { remaining: l.burst, capacity: l.burst, refillPerSec: l.messagesPerSec },
        account: {
          remaining: l.accountBurst,
          capacity: l.accountBurst,
          refillPerSec: l.accountMessagesPerSec,
        },
      });
    }
  }
}

export class FakeServer {
  readonly handshakes: Handshake[] = [];
  readonly conns: FakeConn[] = [];
  /** Refusals for the next handshakes, in order. */
  readonly refusals: Refusal[] = [];
  limits: Limits = { ...DEFAULT_LIMITS };
  /** Send `welcome` on connect (turn off to test the welcome timeout). */
  welcome = true;
  /** `welcome.tokenExpiresAt` (unix ms), when set. */
  tokenExpiresAt?: number;
  /** `tokenExpiresAt` of the ack to a `refresh`. */
  refreshedExpiresAt?: number;
  /** More fields of the next welcomes (e.g. a connect hook's `channels`, §15). */
  welcomeExtra: Record<string, unknown> = {};
  script: FrameScript = (conn, frame) => conn.answer(frame);
  readonly seqs = new Map<string, number>();
  /** Keys published, per channel (`channel\0key` → first seq); a test's lifetime bounds it. */
  readonly keys = new Map<string, number>();
  /** Every message published, in order (duplicates are not). */
  readonly published: Array<{ channel: string; seq: number; data: unknown; key?: string }> = [];
  private connWaiters: Array<{ n: number; resolve: (c: FakeConn) => void }> = [];
  private handshakeWaiters: Array<{ n: number; resolve: (h: Handshake) => void }> = [];
  private readonly http: Server;
  private readonly wss: WebSocketServer;
  url = "";

  private constructor() {
    this.wss = new WebSocketServer({
      noServer: true,
      handleProtocols: (set) => (set.has("tidegate.v1") ? "tidegate.v1" : false),
    });
    this.http = createServer((_req, res) => res.writeHead(404).end());
    this.http.on("upgrade", (req, socket, head) => this.upgrade(req, socket, head));
  }

  static async start(): Promise<FakeServer> {
    const server = new FakeServer();
    await new Promise<void>((resolve) => server.http.listen(0, "127.0.0.1", resolve));
    const { port } = server.http.address() as AddressInfo;
    server.url = `ws://127.0.0.1:${port}/v1/ws`;
    return server;
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const protocols = String(req.headers["sec-websocket-protocol"] ?? "")
      .split(",")
      .map((p) => p.trim())
      .filter(Boolean);
    const bearer = protocols.find((p) => p.startsWith("bearer."));
    const hs: Handshake = { protocols, token: bearer?.slice("bearer.".length) };
    const refusal = this.refusals.shift();
    this.handshakes.push(hs);
    this.handshakeWaiters = this.handshakeWaiters.filter((w) => {
      if (this.handshakes.length < w.n) return true;
      w.resolve(this.handshakes[w.n - 1]!);
      return false;
    });
    if (refusal) {
      hs.refused = refusal;
      const body = JSON.stringify({
        error: refusal.code,
        message: "refused by the fake server",
        retryAfterMs: refusal.retryAfterMs ?? (refusal.retryAfterSec ?? 0) * 1000,
      });
      const headers = [
        `HTTP/1.1 ${refusal.status} Refused`,
        "Content-Type: application/json",
        `Content-Length: ${Buffer.byteLength(body)}`,
        "Connection: close",
      ];
      if (refusal.retryAfterSec !== undefined) headers.push(`Retry-After: ${refusal.retryAfterSec}`);
      socket.end(`${headers.join("\r\n")}\r\n\r\n${body}`);
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      const conn = new FakeConn(ws, hs.token, this);
      this.conns.push(conn);
      if (this.welcome) {
        conn.send({
          type: "welcome",
          connId: `fake-${this.conns.length}`,
          account: "acme",
          node: "fake",
          limits: this.limits,
          ...(this.tokenExpiresAt !== undefined ? { tokenExpiresAt: this.tokenExpiresAt } : {}),
          ...this.welcomeExtra,
        });
      }
      this.connWaiters = this.connWaiters.filter((w) => {
        if (this.conns.length < w.n) return true;
        w.resolve(this.conns[w.n - 1]!);
        return false;
      });
    });
  }

  /** The n-th accepted connection (1-based), once it exists. */
  connection(n: number, guardMs = 5000): Promise<FakeConn> {
    if (this.conns.length >= n) return Promise.resolve(this.conns[n - 1]!);
    return withGuard(
      new Promise((resolve) => this.connWaiters.push({ n, resolve })),
      guardMs,
      `connection #${n}`,
    );
  }

  /** The n-th handshake attempt (1-based, refused or not), once it happened. */
  handshake(n: number, guardMs = 5000): Promise<Handshake> {
    if (this.handshakes.length >= n) return Promise.resolve(this.handshakes[n - 1]!);
    return withGuard(
      new Promise((resolve) => this.handshakeWaiters.push({ n, resolve })),
      guardMs,
      `handshake #${n}`,
    );
  }

  async stop(): Promise<void> {
    for (const c of this.conns) c.ws.terminate();
    this.wss.close();
    await new Promise<void>((resolve) => this.http.close(() => resolve()));
  }
}

function withGuard<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`fake server: no ${what} within ${ms} ms`)), ms);
    p.then((v) => (clearTimeout(t), resolve(v)));
  });
}
