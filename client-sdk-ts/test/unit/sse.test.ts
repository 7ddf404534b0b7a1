/**
 * The SSE transport's pure parts: the event-stream parser (as the broker
 * writes it: `retry`, `id`-only blocks, multi-line `data`, `: ping`,
 * chunks cut anywhere), the position token, the HTTP URLs, and the
 * `transport: "auto"` fallback decision; then the transport itself on a
 * scripted `fetch`: it hands the client typed frame objects.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  MAX_POSITION_BYTES,
  SseParser,
  compactPosition,
  decodePosition,
  encodePosition,
  listHash,
  reconstructSeq,
  residueField,
  type PositionEntry,
} from "../../src/transports/sse-parser.js";
import { httpUrls, sseTransport } from "../../src/transports/sse.js";
import { nextTransport, TransportChooser } from "../../src/transports/auto.js";
import type { FetchLike, FetchResponseLike, TransportHandlers } from "../../src/transport.js";
import WebSocket from "ws";
import { until } from "../helpers/events.js";

const STREAM =
  "retry: 2345\n\n" +
  'id: \nevent: welcome\ndata: {"type":"welcome","connId":"c1"}\n\n' +
  "id: ZG9jOjEgNw\n\n" +
  ": ping\n\n" +
  'id: ZG9jOjEgOA\nevent: message\ndata: {"channel":"doc:1","seq":8,"data":{"a":\ndata: 1}}\n\n' +
  'event: close\r\ndata: {"code":1012,"reason":"draining"}\r\n\r\n';

test("the parser reads the broker's blocks, in any chunking", () => {
  const expected = [
    { retry: 2345 },
    { id: "", event: "welcome", data: '{"type":"welcome","connId":"c1"}' },
    { id: "ZG9jOjEgNw" },
    { id: "ZG9jOjEgOA", event: "message", data: '{"channel":"doc:1","seq":8,"data":{"a":\n1}}' },
    { event: "close", data: '{"code":1012,"reason":"draining"}' },
  ];
  assert.deepEqual(new SseParser().push(STREAM), expected);
  for (const size of [1, 2, 3, 7, 50]) {
    const parser = new SseParser();
    const got = [];
    for (let i = 0; i < STREAM.length; i += size) got.push(...parser.push(STREAM.slice(i, i + size)));
    assert.deepEqual(got, expected, `chunks of ${size}`);
  }
});

test("the parser keeps an unfinished block and skips comments and unknown fields", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push("event: message\ndata: x"), []);
  assert.deepEqual(parser.push("\nfoo: bar\n:comment\ndata:y\r"), []);
  assert.deepEqual(parser.push("\n\n"), [{ event: "message", data: "x\ny" }]);
  assert.deepEqual(parser.push(": ping\n\n\n\n"), []);
  assert.deepEqual(parser.push("retry: soon\n\n"), []);
});

test("named positions round-trip and match the broker's older encoding", () => {
  // base64url("doc:1 7,doc:2 1764650000000000") as earlier brokers wrote it.
  const list = ["doc:1", "doc:2"];
  const map = new Map([
    ["doc:1", 7],
    ["doc:2", 1764650000000000],
  ]);
  const token = encodePosition(list, map);
  assert.equal(token, Buffer.from("doc:1 7,doc:2 1764650000000000").toString("base64url"));
  assert.deepEqual(decodePosition(token, list), map);
  assert.deepEqual(decodePosition("", list), new Map());
  assert.equal(decodePosition("!!", list), undefined);
  assert.equal(decodePosition(Buffer.from("doc:1 x").toString("base64url"), list), undefined);
  assert.equal(decodePosition(Buffer.from("nospace").toString("base64url"), list), undefined);
  // A channel without a seq is left out (it starts live).
  const one = encodePosition(list, new Map([["doc:2", 5]]));
  assert.equal(one, Buffer.from("doc:2 5").toString("base64url"));
});

test("compact positions are the broker's layout", () => {
  // What broker/src/protocol/position.rs's tests check too.
  assert.equal(listHash(["doc:1", "doc:2"]), 0x921d6466);
  const list = ["doc:1", "doc:2"];
  const token = compactPosition(list, new Map([["doc:1", 42]]));
  assert.equal(token, "~2.CSHWRmAAAAAAArAAAAAAAA");
  // A field comes back verbatim: only the broker reads it as a seq.
  assert.deepEqual(decodePosition(token, list), new Map([["doc:1", "AAAAAAAr"]]));
  assert.deepEqual(decodePosition("~2.AomIAqAAAAAAAB", ["doc:1"]), new Map([["doc:1", "AAAAAAAB"]]));
  // The residue is mod 2^48 − 1.
  assert.equal(compactPosition(list, new Map([["doc:1", 2 ** 48 - 1 + 42]])), token);
  assert.equal(residueField(0), "AAAAAAAB");
  assert.equal(residueField(2 ** 48 - 2), "________", "the largest field, M");
  // Tied to its list: another order, another count, is not this stream's.
  assert.equal(decodePosition(token, ["doc:2", "doc:1"]), undefined);
  assert.equal(decodePosition(token, ["doc:1"]), undefined);
  assert.equal(decodePosition(token.slice(0, -1), list), undefined);
  assert.equal(decodePosition("~3.CSHWRmAAAAAAArAAAAAAAA", list), undefined);
  assert.equal(decodePosition(token.replace("AAAAAAAA", "AAA*AAAA"), list), undefined);
  // The unreleased `~1.` form (nine digits of seq + 1) reads as whole seqs.
  assert.deepEqual(decodePosition("~1.CSHWRmAAAAAAAArAAAAAAAAA", list), new Map([["doc:1", 42]]));
  assert.deepEqual(decodePosition("~1.AomIAqAAAAAAAAB", ["doc:1"]), new Map([["doc:1", 0]]));
});

test("fields are written back verbatim and whole seqs as their residue, with no clock", () => {
  const list = ["doc:a", "doc:b", "doc:c"];
  const now = 1796000000000000;
  const field = residueField(now + 5);
  const token = encodePosition(list, new Map<string, PositionEntry>([["doc:a", field], ["doc:b", now]]));
  assert.ok(token.startsWith("~2."), "a field forces the compact form");
  assert.deepEqual(
    decodePosition(token, list),
    new Map([
      ["doc:a", field],
      ["doc:b", residueField(now)],
    ]),
  );
  // Whole seqs only: the named form, which every broker reads.
  const named = encodePosition(list, new Map([["doc:b", now]]));
  assert.equal(named, Buffer.from(`doc:b ${now}`).toString("base64url"));
  // Reading a field back (only for a live ack's seq), at the window's edges.
  const top = now + 2 ** 40;
  for (const seq of [now, top, top - 1, now - 8 * 365 * 86400e6, top - (2 ** 48 - 1) + 1]) {
    assert.equal(reconstructSeq(residueField(seq), now), seq, `${seq}`);
  }
  assert.equal(reconstructSeq("AAAAAAAA", now), undefined, "no seq");
});

test("a position too long to name its channels is compact and fits 4 KiB", () => {
  // 500 channels of 128 bytes (the pro plan) at 16-digit seqs: the named
  // form would be over 80 KiB; the compact one is 9 + 8 × 500 bytes.
  const list = Array.from({ length: 500 }, (_, i) => `doc:${String(i).padStart(124, "0")}`);
  const seqs = new Map(list.map((c, i) => [c, 1764650000000000 + i] as [string, number]));
  const token = encodePosition(list, seqs);
  assert.ok(token.startsWith("~2."), token.slice(0, 10));
  assert.equal(token.length, 9 + 8 * list.length);
  assert.ok(token.length <= MAX_POSITION_BYTES);
  assert.deepEqual(
    decodePosition(token, list),
    new Map(list.map((c, i) => [c, residueField(1764650000000000 + i)])),
  );
});

test("the HTTP URLs sit next to the WebSocket's path", () => {
  assert.deepEqual(httpUrls("ws://127.0.0.1:8080/v1/ws"), {
    sse: "http://127.0.0.1:8080/v1/sse",
    publish: "http://127.0.0.1:8080/v1/client/publish",
  });
  assert.deepEqual(httpUrls("wss://edge.example/rt/v1/ws?x=1"), {
    sse: "https://edge.example/rt/v1/sse",
    publish: "https://edge.example/rt/v1/client/publish",
  });
  assert.throws(() => httpUrls("not a url"), TypeError);
});

test("auto falls back to SSE when an upgrade fails or is cut before welcome", () => {
  const cut = { code: 1006, reason: "", wasOpen: false };
  const cutAfterOpen = { code: 1006, reason: "", wasOpen: true };
  const proxy403 = { ...cut, refusal: { status: 403 } };
  const broker401 = { ...cut, refusal: { status: 401, code: "unauthorized" } };
  const broker429 = { ...cut, refusal: { status: 429, code: "ip_rate_limited", retryAfterMs: 500 } };
  assert.equal(nextTransport("auto", "websocket", cut, false), "sse");
  assert.equal(nextTransport("auto", "websocket", cutAfterOpen, false), "sse");
  assert.equal(nextTransport("auto", "websocket", proxy403, false), "sse");
  // The broker's own refusals mean the same over SSE: stay.
  assert.equal(nextTransport("auto", "websocket", broker401, false), "websocket");
  assert.equal(nextTransport("auto", "websocket", broker429, false), "websocket");
  // A transport that reached welcome is kept.
  assert.equal(nextTransport("auto", "websocket", cut, true), "websocket");
  assert.equal(nextTransport("auto", "sse", cut, true), "sse");
  // Both failing before welcome (the network is down): alternate.
  assert.equal(nextTransport("auto", "sse", cut, false), "websocket");
  // A client whose WebSocket worked once treats later failures as outages.
  assert.equal(nextTransport("auto", "websocket", cut, false, true), "websocket");
  assert.equal(nextTransport("auto", "websocket", proxy403, false, true), "websocket");
  // Forced transports never switch.
  assert.equal(nextTransport("websocket", "websocket", cut, false), "websocket");
  assert.equal(nextTransport("sse", "sse", cut, false), "sse");
});

test("the chooser starts on the WebSocket in auto, and on what was forced", () => {
  const auto = new TransportChooser(undefined, WebSocket, undefined);
  assert.equal(auto.current, "websocket");
  assert.equal(auto.closed({ code: 1006, reason: "", wasOpen: false }, false), true);
  assert.equal(auto.current, "sse");
  assert.equal(new TransportChooser("sse", WebSocket, undefined).current, "sse");
  const forced = new TransportChooser("websocket", WebSocket, undefined);
  assert.equal(forced.closed({ code: 1006, reason: "", wasOpen: false }, false), false);
  assert.equal(forced.current, "websocket");
  assert.throws(() => new TransportChooser("smoke" as "auto", WebSocket, undefined), TypeError);
  const worked = new TransportChooser("auto", WebSocket, undefined);
  assert.equal(worked.closed({ code: 1012, reason: "", wasOpen: true }, true), false);
  assert.equal(worked.closed({ code: 1006, reason: "", wasOpen: false }, false), false);
  assert.equal(worked.current, "websocket");
});

// ------------------------------------------- the transport hands objects ---

/** A response body the test writes to, chunk by chunk. */
class Feed {
  private readonly chunks: Uint8Array[] = [];
  private waiting?: (r: { done: boolean; value?: Uint8Array }) => void;
  private ended = false;

  push(text: string): void {
    const value = new TextEncoder().encode(text);
    const w = this.waiting;
    this.waiting = undefined;
    if (w) w({ done: false, value });
    else this.chunks.push(value);
  }

  end(): void {
    this.ended = true;
    const w = this.waiting;
    this.waiting = undefined;
    w?.({ done: true });
  }

  response(): FetchResponseLike {
    return {
      status: 200,
      headers: { get: () => null },
      text: async () => "",
      body: {
        getReader: () => ({
          read: () => {
            const value = this.chunks.shift();
            if (value) return Promise.resolve({ done: false, value });
            if (this.ended) return Promise.resolve({ done: true });
            return new Promise((resolve) => (this.waiting = resolve));
          },
          cancel: async () => this.end(),
        }),
      },
    };
  }
}

/** The frames handed to the client, and the next one matching `pred`. */
class Received {
  readonly frames: unknown[] = [];
  private waiters: Array<{ pred: (f: Record<string, unknown>) => boolean; resolve: (f: unknown) => void }> = [];

  readonly handlers: TransportHandlers = {
    open: () => undefined,
    message: (frame) => {
      this.frames.push(frame);
      this.waiters = this.waiters.filter((w) => {
        if (!w.pred(frame as Record<string, unknown>)) return true;
        w.resolve(frame);
        return false;
      });
    },
    close: (info) => this.frames.push({ closed: info }),
  };

  next(pred: (f: Record<string, unknown>) => boolean, what: string): Promise<unknown> {
    const seen = this.frames.find((f) => pred(f as Record<string, unknown>));
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error(`no ${what} within 5000 ms`)), 5000);
      this.waiters.push({ pred, resolve: (f) => (clearTimeout(guard), resolve(f)) });
    });
  }
}

test("the SSE transport hands the client frame objects, not text: acks, errors, messages", async () => {
  const streams: Feed[] = [];
  const gets: string[] = [];
  const posts: Array<{ headers: Record<string, string>; body: string }> = [];
  const answers = [
    { status: 200, body: { seq: 1796000000000042 }, retryAfter: null },
    { status: 429, body: { error: "rate_limited", message: "slow down", retryAfterMs: 250 }, retryAfter: "1" },
  ];
  const fetch: FetchLike = async (url, init) => {
    if (init.method === "POST") {
      posts.push({ headers: init.headers ?? {}, body: init.body ?? "" });
      const a = answers.shift()!;
      return {
        status: a.status,
        headers: { get: (name) => (name.toLowerCase() === "retry-after" ? a.retryAfter : null) },
        body: null,
        text: async () => JSON.stringify(a.body),
      };
    }
    gets.push(url);
    const feed = new Feed();
    streams.push(feed);
    return feed.response();
  };
  const got = new Received();
  const t = sseTransport(fetch)("ws://127.0.0.1:1/v1/ws", ["tidegate.v1", "bearer.tok"], got.handlers);
  try {
    await until(() => streams.length === 1, "the stream");
    streams[0]!.push('retry: 2000\n\nid: \nevent: welcome\ndata: {"type":"welcome","connId":"c1"}\n\n');
    assert.deepEqual(await got.next((f) => f["type"] === "welcome", "the welcome"), {
      type: "welcome",
      connId: "c1",
    });

    // A subscribe reopens the stream; the `id:` where doc:1 went live is its ack.
    t.send({ type: "subscribe", channel: "doc:1", id: 1 });
    await until(() => streams.length === 2, "the reopened stream");
    assert.equal(gets[1], "http://127.0.0.1:1/v1/sse?channel=doc%3A1");
    streams[1]!.push(`id: ${Buffer.from("doc:1 7").toString("base64url")}\n\n`);
    assert.deepEqual(await got.next((f) => f["id"] === 1, "the subscribe's ack"), { type: "ack", id: 1, seq: 7 });

    // A message event's data, parsed once, is a `message` frame.
    streams[1]!.push(
      `id: ${Buffer.from("doc:1 8").toString("base64url")}\nevent: message\n` +
        'data: {"channel":"doc:1","seq":8,"data":{"text":"hi"},"conflated":true}\n\n',
    );
    assert.deepEqual(await got.next((f) => f["type"] === "message", "the message"), {
      type: "message",
      channel: "doc:1",
      seq: 8,
      data: { text: "hi" },
      conflated: true,
    });

    // A publish's 200 is an ack, its 429 a rate_limited error with retryAfterMs.
    t.send({ type: "publish", channel: "doc:1", data: { n: 1 }, key: "k-1", id: 2 });
    t.send({ type: "publish", channel: "doc:1", data: { n: 2 }, key: "k-2", id: 3 });
    assert.deepEqual(await got.next((f) => f["id"] === 2, "the publish's ack"), {
      type: "ack",
      id: 2,
      seq: 1796000000000042,
    });
    assert.deepEqual(await got.next((f) => f["id"] === 3, "the publish's error"), {
      type: "error",
      id: 3,
      code: "rate_limited",
      message: "slow down",
      retryAfterMs: 250,
      channel: "doc:1",
    });
    assert.deepEqual(
      posts.map((p) => [p.headers["Idempotency-Key"], p.headers["Authorization"], p.body]),
      [
        ["k-1", "Bearer tok", '{"channel":"doc:1","data":{"n":1}}'],
        ["k-2", "Bearer tok", '{"channel":"doc:1","data":{"n":2}}'],
      ],
    );

    // A socket-only request is answered unsupported_transport.
    t.send({ type: "presence_stats", channel: "doc:1", id: 4 });
    const refused = (await got.next((f) => f["id"] === 4, "the presence error")) as Record<string, unknown>;
    assert.equal(refused["type"], "error");
    assert.equal(refused["code"], "unsupported_transport");
    assert.equal(refused["channel"], "doc:1");

    assert.ok(got.frames.length >= 6);
    for (const f of got.frames) assert.equal(typeof f, "object", `handed a ${typeof f}: ${String(f)}`);
  } finally {
    t.close();
    for (const s of streams) s.end();
  }
});
