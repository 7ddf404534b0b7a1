import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { parseRetryAfter, webSocketTransport } from "../../src/transports/websocket.js";
import { frameBytes } from "../../src/wire.js";
import { FakeServer } from "../helpers/fake-server.js";
import { until } from "../helpers/events.js";
import { tokenExpiryMs } from "../../src/token.js";
import { TidegateError } from "../../src/errors.js";

test("Retry-After is read as seconds or as an HTTP date", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(" 1.5 "), 1500);
  const now = Date.parse("Sun, 30 Nov 2025 10:00:00 GMT");
  assert.equal(parseRetryAfter("Sun, 30 Nov 2025 10:00:07 GMT", now), 7000);
  assert.equal(parseRetryAfter("Sun, 30 Nov 2025 09:00:00 GMT", now), 0, "a past date means now");
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(undefined), undefined);
});

test("a JWT's exp is read without verifying it; junk gives undefined", () => {
  const payload = Buffer.from(JSON.stringify({ sub: "acme", exp: 1_900_000_000 })).toString("base64url");
  assert.equal(tokenExpiryMs(`h.${payload}.s`), 1_900_000_000_000);
  assert.equal(tokenExpiryMs("not-a-jwt"), undefined);
  assert.equal(tokenExpiryMs("a.%%%.c"), undefined);
});

test("TidegateError carries the code, whether it is temporary, and details", () => {
  const e = new TidegateError("rate_limited", "dropped", { id: 7, attempts: 3, retryAfterMs: 50 });
  assert.ok(e instanceof Error);
  assert.equal(e.name, "TidegateError");
  assert.equal(e.code, "rate_limited");
  assert.equal(e.temporary, true);
  assert.equal(e.id, 7);
  assert.equal(e.attempts, 3);
  assert.equal(new TidegateError("forbidden", "no").temporary, false);
  assert.equal(new TidegateError("queue_full", "full").temporary, true);
});

test("the WebSocket transport writes a frame's JSON and hands on decoded objects, dropping other texts", async () => {
  const server = await FakeServer.start();
  server.script = () => undefined; // the test answers
  const received: unknown[] = [];
  let ackSeen!: () => void;
  const acked = new Promise<void>((resolve) => (ackSeen = resolve));
  const t = webSocketTransport(WebSocket)(server.url, ["tidegate.v1", "bearer.tok"], {
    open: () => undefined,
    message: (frame) => {
      received.push(frame);
      if (frame.type === "ack") ackSeen();
    },
    close: () => undefined,
  });
  try {
    const conn = await server.connection(1);
    const raw: string[] = [];
    conn.ws.on("message", (data) => raw.push(data.toString()));
    const frame = { type: "publish" as const, channel: "doc:1", data: { text: "é" }, key: "k-1", id: 7 };
    await until(() => received.length === 1, "the welcome");
    t.send(frame);
    await conn.waitFor((f) => f.type === "publish");
    assert.deepEqual(raw, [JSON.stringify(frame)]);
    assert.equal(frameBytes(frame), Buffer.byteLength(raw[0]!), "what the client measures is what is sent");
    // Not JSON, not an object: dropped, as the frame handler always did.
    for (const text of ["not json", "42", "null", '"ack"', "[1]"]) conn.ws.send(text);
    conn.send({ type: "ack", id: 7, seq: 1 });
    await acked;
    assert.equal(received.length, 2);
    assert.equal((received[0] as { type: string }).type, "welcome");
    assert.deepEqual(received[1], { type: "ack", id: 7, seq: 1 });
  } finally {
    t.close();
    await server.stop();
  }
});
