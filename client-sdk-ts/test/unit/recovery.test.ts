/**
 * No silent loss (§11) against the fake server: `slow_consumer` makes the
 * SDK subscribe again with `since`; messages arriving before that ack wait,
 * so the recovered ones come first; `gap` only when history could not
 * cover the hole; a conflated message's seq jump is not a loss.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { connectedRig } from "../helpers/setup.js";
import { nextEvent } from "../helpers/events.js";

test("after slow_consumer the dropped messages are recovered before newer ones, once each", async () => {
  const rig = await connectedRig();
  const { client, conn, server } = rig;
  try {
    const got: number[] = [];
    const gaps: unknown[] = [];
    client.on("gap", (g) => gaps.push(g));
    server.script = (c, frame) => {
      if (frame.type === "subscribe") {
        if (frame.since === undefined) c.send({ type: "ack", id: frame.id, seq: 10 });
      } else c.answer(frame);
    };
    await client.subscribe("doc:1", (_d, m) => got.push(m.seq));
    assert.equal(client.lastSeq("doc:1"), 10, "the ack's seq is the position");
    conn.send({ type: "message", channel: "doc:1", seq: 11, data: 11 });
    // 12 and 13 were dropped; the notice comes before anything newer.
    conn.send({ type: "error", code: "slow_consumer", dropped: 2 });
    const resub = await conn.waitFor((f) => f.type === "subscribe" && f.since !== undefined);
    assert.equal(resub.since, 11, "since = the last delivered");
    // Live 14 arrives before the ack (sent on the old subscription).
    conn.send({ type: "message", channel: "doc:1", seq: 14, data: 14 });
    conn.send({ type: "ack", id: resub.id, recovered: true, seq: 14 });
    for (const seq of [12, 13, 14]) conn.send({ type: "message", channel: "doc:1", seq, data: seq });
    conn.send({ type: "message", channel: "doc:1", seq: 15, data: 15 });
    await nextEvent(client, "message", (m) => m.seq === 15);
    assert.deepEqual(got, [11, 12, 13, 14, 15]);
    assert.deepEqual(gaps, []);
  } finally {
    await rig.cleanup();
  }
});

test("a recovery history cannot cover raises one gap and keeps what arrived", async () => {
  const rig = await connectedRig();
  const { client, conn, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type !== "subscribe") c.answer(frame);
    };
    const got: number[] = [];
    void client.subscribe("doc:2", (_d, m) => got.push(m.seq), { since: 5 });
    const first = await conn.waitFor((f) => f.type === "subscribe");
    conn.send({ type: "ack", id: first.id, recovered: true, seq: 5 });
    conn.send({ type: "error", code: "slow_consumer", dropped: 40 });
    const resub = await conn.waitFor((f) => f.type === "subscribe" && f.id !== first.id);
    assert.equal(resub.since, 5);
    conn.send({ type: "message", channel: "doc:2", seq: 47, data: 47 });
    const gap = nextEvent(client, "gap");
    conn.send({ type: "ack", id: resub.id, recovered: false, seq: 48 });
    assert.deepEqual(await gap, { channel: "doc:2", since: 5, seq: 48 });
    conn.send({ type: "message", channel: "doc:2", seq: 48, data: 48 });
    conn.send({ type: "message", channel: "doc:2", seq: 49, data: 49 });
    await nextEvent(client, "message", (m) => m.seq === 49);
    assert.deepEqual(got, [47, 49], "48 is at the ack's position: already covered");
  } finally {
    await rig.cleanup();
  }
});

test("a conflated message's seq jump is delivered with no gap and no recovery", async () => {
  const rig = await connectedRig();
  const { client, conn, server } = rig;
  try {
    server.script = (c, frame) => {
      if (frame.type !== "subscribe") c.answer(frame);
    };
    const got: Array<[number, boolean]> = [];
    const gaps: unknown[] = [];
    client.on("gap", (g) => gaps.push(g));
    const ready = client.subscribe("cursor:1", (_d, m) => got.push([m.seq, m.conflated]));
    const sub = await conn.waitFor((f) => f.type === "subscribe");
    conn.send({ type: "ack", id: sub.id, seq: 100 });
    await ready;
    conn.send({ type: "message", channel: "cursor:1", seq: 101, data: 1 });
    conn.send({ type: "message", channel: "cursor:1", seq: 150, data: 2, conflated: true });
    await nextEvent(client, "message", (m) => m.seq === 150);
    assert.deepEqual(got, [
      [101, false],
      [150, true],
    ]);
    assert.deepEqual(gaps, []);
    assert.equal(conn.of("subscribe").length, 1, "no resubscribe");
  } finally {
    await rig.cleanup();
  }
});
