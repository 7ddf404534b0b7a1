// GET /v1/sse (PROTOCOL §14) with a real EventSource client (the
// `eventsource` package, WHATWG-compliant): the welcome and messages, and
// a stream cut mid-way that the client resumes by itself with
// Last-Event-ID, with no gap and no duplicate.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, test } from "node:test";
import { EventSource } from "eventsource";
import { API_KEY, TIDEGATE_BIN, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  broker = await startBroker();
});
after(async () => {
  await broker?.stop();
});

function token() {
  return execFileSync(TIDEGATE_BIN, ["token", "--account", "acme", "--sub", "doc:*", "--pub", "doc:*"])
    .toString()
    .trim();
}

async function publish(channel, data) {
  const res = await fetch(`${broker.url}/v1/publish`, {
    method: "POST",
    headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ channel, data }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).seq;
}

/** Resolves with the next `name` event of `es`. */
function next(es, name) {
  return new Promise((resolve) => es.addEventListener(name, resolve, { once: true }));
}

test("EventSource resumes a cut stream by itself with no gap and no duplicate", async () => {
  const requests = [];
  let cut;
  // A fetch that records each request's Last-Event-ID and lets the test
  // end the first response's body, as a proxy cutting it would.
  const cuttable = async (url, init) => {
    requests.push(init.headers["Last-Event-ID"] ?? null);
    const res = await fetch(url, init);
    if (requests.length > 1) return res;
    const reader = res.body.getReader();
    const body = new ReadableStream({
      start(controller) {
        cut = () => controller.close();
      },
      async pull(controller) {
        const { done, value } = await reader.read().catch(() => ({ done: true }));
        if (done) controller.close();
        else controller.enqueue(value);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const es = new EventSource(`${broker.url}/v1/sse?channel=doc:es&token=${token()}`, { fetch: cuttable });
  try {
    const welcome = await next(es, "welcome");
    assert.equal(JSON.parse(welcome.data).account, "acme");
    const seqs = [];
    const got = [];
    const received = new Promise((resolve) =>
      es.addEventListener("message", (e) => {
        const m = JSON.parse(e.data);
        assert.equal(m.channel, "doc:es");
        assert.ok(e.lastEventId, "every message carries an id");
        got.push(m.seq);
        if (got.length === 2) cut();
        if (got.length === 5) resolve();
      }),
    );
    seqs.push(await publish("doc:es", 0));
    seqs.push(await publish("doc:es", 1));
    // Published while the client is away (it reconnects after `retry`).
    const recovered = next(es, "recovered");
    for (let n = 2; n < 4; n++) seqs.push(await publish("doc:es", n));
    const r = await recovered;
    assert.deepEqual(JSON.parse(r.data), { channel: "doc:es", recovered: true });
    seqs.push(await publish("doc:es", 4));
    await received;
    assert.deepEqual(got, seqs);
    assert.equal(requests.length, 2);
    assert.equal(requests[0], null);
    assert.ok(requests[1], "the reconnect sent Last-Event-ID");
  } finally {
    es.close();
  }
});
