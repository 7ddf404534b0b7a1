import { test } from "node:test";
import assert from "node:assert/strict";
import { connectedRig } from "../helpers/setup.js";
import { nextEvent, settle } from "../helpers/events.js";

test("publishes listed in rate_limited are resent after retryAfterMs, in order", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server, sync } = rig;
  try {
    const dropped: number[] = [];
    server.script = (c, frame) => {
      if (frame.type !== "publish") return c.answer(frame);
      const first = c.of("publish").filter((f) => f.id === frame.id).length === 1;
      if (first && frame.data.i >= 2) {
        dropped.push(frame.id);
        if (dropped.length === 3) {
          c.send({ type: "error", code: "rate_limited", retryAfterMs: 250, dropped: 3, ids: dropped });
        }
        return;
      }
      c.answer(frame);
    };
    const limited = nextEvent(client, "rateLimited");
    const publishes = Array.from({ length: 5 }, (_, i) => client.publish("doc:1", { i }));
    const event = await limited;
    assert.deepEqual(event, { retryAfterMs: 250, dropped: 3, ids: dropped });
    await sync();
    assert.equal(conn.of("publish").length, 5);
    clock.advance(249);
    await sync();
    assert.equal(conn.of("publish").length, 5, "nothing is resent before retryAfterMs");
    clock.advance(1);
    await sync();
    assert.ok(conn.of("publish").length >= 6, "the first resend goes out at retryAfterMs");
    clock.advance(1000);
    const results = await Promise.all(publishes);
    const resent = conn.of("publish").slice(5).map((f) => f.id);
    assert.deepEqual(resent, dropped, "the dropped frames again, same ids, same order");
    assert.deepEqual(
      results.map((r) => r.attempts),
      [1, 1, 2, 2, 2],
    );
    const seqs = results.map((r) => r.seq);
    assert.equal(new Set(seqs).size, 5, "each publish acked once");
  } finally {
    await rig.cleanup();
  }
});

test("a publish dropped more than maxRetries times rejects with rate_limited", async () => {
  const rig = await connectedRig({ maxRetries: 2 });
  const { client, conn, clock, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type === "publish") {
        c.send({ type: "error", code: "rate_limited", retryAfterMs: 100, dropped: 1, ids: [frame.id] });
      } else c.answer(frame);
    };
    const result = settle(client.publish("doc:1", "never"));
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      await conn.waitFor((f) => f.type === "publish", attempt - 1);
      if (attempt < 3) {
        await nextEvent(client, "rateLimited");
        clock.advance(100);
      }
    }
    const r = await result;
    assert.equal(r.ok, false);
    assert.equal(!r.ok && r.error.code, "rate_limited");
    assert.equal(!r.ok && r.error.attempts, 3);
    assert.equal(!r.ok && r.error.temporary, true);
    assert.equal(conn.of("publish").length, 3, "1 send + maxRetries resends");
  } finally {
    await rig.cleanup();
  }
});

test("a rate-limited subscribe is resent too and still resolves", async () => {
  const rig = await connectedRig();
  const { client, conn, clock, server } = rig;
  try {
    let dropped = false;
    server.script = (c, frame) => {
      if (frame.type === "subscribe" && !dropped) {
        dropped = true;
        c.send({ type: "error", code: "rate_limited", retryAfterMs: 50, dropped: 1, ids: [frame.id] });
      } else c.answer(frame);
    };
    const ready = client.subscribe("doc:1", () => undefined);
    await nextEvent(client, "rateLimited");
    clock.advance(50);
    assert.deepEqual(await ready, { channel: "doc:1", recovered: undefined });
    assert.equal(conn.of("subscribe").length, 2);
  } finally {
    await rig.cleanup();
  }
});
