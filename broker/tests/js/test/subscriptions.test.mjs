// GraphQL subscriptions over graphql-transport-ws (§12) with the
// ecosystem's own client, `graphql-ws`, against the release broker: it
// subscribes, publishes with the mutation, recovers with `since`, and
// hears per-operation refusals while its socket stays open.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { API_KEY, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  broker = await startBroker({
    account_burst: 10000,
    account_messages_per_sec: 10000,
    max_subscriptions: 3,
  });
});
after(async () => broker?.stop());

const MESSAGES = "subscription($c: String!, $s: Seq) { messages(channel: $c, since: $s) { seq data } }";
const PUBLISH = "mutation($c: String!, $d: JSON!) { publish(channel: $c, data: $d) { seq } }";

function client() {
  return createClient({
    url: `${broker.url.replace("http", "ws")}/v1/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${API_KEY}` },
    retryAttempts: 0,
  });
}

/** A query or mutation's one result; rejects with an `error` message's errors. */
async function run(c, query, variables) {
  const it = c.iterate({ query, variables });
  const { value } = await it.next();
  await it.return?.();
  return value;
}

/** A subscription's first `n` results (or its error), within 10 s. */
function collect(c, query, variables, n) {
  const got = [];
  let dispose = () => {};
  const done = new Promise((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error(`timed out with ${JSON.stringify(got)}`)), 10_000);
    const end = (v) => {
      clearTimeout(guard);
      resolve(v);
    };
    dispose = c.subscribe(
      { query, variables },
      {
        next: (r) => {
          got.push(r);
          if (got.length === n) end(got);
        },
        error: (e) => end({ error: e, got }),
        complete: () => end(got),
      },
    );
  });
  return { done, stop: () => dispose() };
}

test("the graphql-ws client subscribes, publishes with the mutation and recovers with since", async () => {
  const c = client();
  try {
    // A position first: the subscription recovers what follows it, so it
    // need not be live before the publishes.
    const start = (await run(c, PUBLISH, { c: "doc:js1", d: { text: "start" } })).data.publish.seq;
    const live = collect(c, MESSAGES, { c: "doc:js1", s: start }, 3);
    const seqs = [];
    for (const text of ["a", "b", "c"]) {
      const r = await run(c, PUBLISH, { c: "doc:js1", d: { text } });
      assert.equal(r.errors, undefined, JSON.stringify(r));
      assert.ok(r.extensions.rateLimit.cost > 0, "the mutation says what it cost");
      seqs.push(r.data.publish.seq);
    }
    const got = await live.done;
    live.stop();
    assert.deepEqual(got.map((r) => r.data.messages.seq), seqs);
    assert.deepEqual(got.map((r) => r.data.messages.data.text), ["a", "b", "c"]);
    assert.equal(got[0].extensions.recovered, true);
    assert.ok(got[0].extensions.rateLimit.cost > 0, "the first next carries the charge");
    // Resume after the first: the other two, in order, once.
    const again = collect(c, MESSAGES, { c: "doc:js1", s: seqs[0] }, 2);
    const recovered = await again.done;
    again.stop();
    assert.deepEqual(recovered.map((r) => r.data.messages.seq), seqs.slice(1));
  } finally {
    await c.dispose();
  }
});

test("refusals concern one operation: the socket stays open", async () => {
  const c = client();
  try {
    // Too expensive: a read priced far above the bucket's capacity.
    await assert.rejects(run(c, "{ channels(prefix: \"doc\", first: 100000) { name history(last: 100) { seq } } }"), (e) => {
      assert.equal(e[0].extensions.code, "QUERY_TOO_EXPENSIVE", JSON.stringify(e));
      return true;
    });
    // A bad channel name: that subscription's error.
    const bad = await collect(c, MESSAGES, { c: "not a channel!" }, 1).done;
    assert.equal(bad.error[0].extensions.code, "BAD_REQUEST", JSON.stringify(bad));
    // The cap (3): three subscriptions run, the fourth is refused.
    const start = (await run(c, PUBLISH, { c: "doc:cap1", d: 0 })).data.publish.seq;
    const subs = [1, 2, 3].map((i) => collect(c, MESSAGES, { c: `doc:cap${i}`, s: i === 1 ? start : undefined }, 1));
    const fourth = await collect(c, MESSAGES, { c: "doc:cap4" }, 1).done;
    assert.equal(fourth.error[0].extensions.code, "TOO_MANY_SUBSCRIPTIONS", JSON.stringify(fourth));
    // Still open: the first subscription gets its message.
    const r = await fetch(`${broker.url}/v1/publish`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ channel: "doc:cap1", data: 1 }),
    });
    assert.equal(r.status, 200);
    const [first] = await subs[0].done;
    assert.equal(first.data.messages.data, 1);
    for (const s of subs) s.stop();
  } finally {
    await c.dispose();
  }
});
