// GraphQL `subscription { presence }` (§12, §13) with the ecosystem's own
// client, `graphql-ws`, against the release broker: the members as they
// stand first, then the joins and leaves of `/v1/ws` members in the
// shipped `note:` namespace (diffs every 200 ms), as `next` results.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, test } from "node:test";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { API_KEY, REPO_ROOT, TIDEGATE_BIN, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  broker = await startBroker();
});
after(async () => broker?.stop());

// 1 + 1 + (1 + 50×2) + (1 + 50) = 154, under the shipped key's 200.
const PRESENCE =
  "subscription($c: String!) { presence(channel: $c) { channel joins { connId info } leaves { connId } } }";

function token(user) {
  return execFileSync(
    TIDEGATE_BIN,
    ["token", "--config", `${REPO_ROOT}/config.toml`, "--account", user, "--sub", "note:*", "--info", JSON.stringify({ name: user })],
  )
    .toString()
    .trim();
}

/** A `/v1/ws` member of `channel`: its socket and connection id, once subscribed. */
async function member(user, channel) {
  const ws = new WebSocket(`${broker.url.replace("http", "ws")}/v1/ws`, ["tidegate.v1", `bearer.${token(user)}`]);
  const frames = [];
  let wake = () => {};
  ws.on("message", (m) => {
    frames.push(JSON.parse(m.toString()));
    wake();
  });
  const until = async (pred) => {
    for (;;) {
      const at = frames.findIndex(pred);
      if (at >= 0) return frames.splice(at, 1)[0];
      await new Promise((r) => (wake = r));
    }
  };
  const welcome = await until((f) => f.type === "welcome");
  ws.send(JSON.stringify({ type: "subscribe", channel, id: 1 }));
  const ack = await until((f) => f.id === 1);
  assert.equal(ack.type, "ack", JSON.stringify(ack));
  return { ws, connId: welcome.connId };
}

/** Pulls `next` results of a subscription one at a time, each within 10 s. */
function results(c, query, variables) {
  const got = [];
  const waiting = [];
  let failed;
  c.subscribe(
    { query, variables },
    {
      next: (r) => (waiting.length ? waiting.shift()(r) : got.push(r)),
      error: (e) => {
        failed = e;
        while (waiting.length) waiting.shift()(Promise.reject(e));
      },
      complete: () => {},
    },
  );
  return () => {
    if (failed) return Promise.reject(failed);
    if (got.length) return Promise.resolve(got.shift());
    return new Promise((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error("no result in 10 s")), 10_000);
      waiting.push((r) => {
        clearTimeout(guard);
        resolve(r);
      });
    });
  };
}

test("the graphql-ws client gets the members, then each window's joins and leaves", async () => {
  const ann = await member("ann", "note:js");
  const c = createClient({
    url: `${broker.url.replace("http", "ws")}/v1/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${API_KEY}` },
    retryAttempts: 0,
  });
  const bob = [];
  try {
    const next = results(c, PRESENCE, { c: "note:js" });
    // Ann's join may still wait in its window: she is listed either way,
    // in the first result or in the window's diff after it.
    const members = new Map();
    const apply = (r) => {
      assert.equal(r.errors, undefined, JSON.stringify(r));
      for (const m of r.data.presence.joins) members.set(m.connId, m);
      for (const m of r.data.presence.leaves) members.delete(m.connId);
    };
    const first = await next();
    assert.equal(first.extensions.rateLimit.cost, 154, "the first result says what the subscription cost");
    assert.equal(first.data.presence.channel, "note:js");
    apply(first);
    while (!members.has(ann.connId)) apply(await next());
    assert.deepEqual(members.get(ann.connId), { connId: ann.connId, info: { name: "ann" } });
    bob.push(await member("bob", "note:js"));
    while (!members.has(bob[0].connId)) apply(await next());
    ann.ws.close();
    while (members.has(ann.connId)) apply(await next());
    assert.deepEqual([...members.keys()], [bob[0].connId]);
  } finally {
    await c.dispose();
    ann.ws.close();
    for (const b of bob) b.ws.close();
  }
});
