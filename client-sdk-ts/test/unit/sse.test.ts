/**
 * The SSE transport's pure parts: the event-stream parser (as the broker
 * writes it: `retry`, `id`-only blocks, multi-line `data`, `: ping`,
 * chunks cut anywhere), the position token, the HTTP URLs, and the
 * `transport: "auto"` fallback decision.
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
import { httpUrls } from "../../src/transports/sse.js";
import { nextTransport, TransportChooser } from "../../src/transports/auto.js";
import WebSocket from "ws";

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
