// Issue 38's GraphQL attacks for bench/bounds-attacks.mjs: the classes the
// second audit found, replayed from outside against a broker binary. Each
// starts its own broker (the sample API key, loopback only), runs for a
// bounded time, and reports what the attacker got for what it paid: the
// units charged (`extensions.rateLimit.cost`, `X-RateLimit-Remaining`),
// response sizes, the broker's CPU time per request (/proc/PID/stat) and
// what /healthz took while the attack ran.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

import { WebSocket, median, publishHistory, sleep, startBroker, stop } from "./harness.mjs";

const KEY = "tidegate-sample-publish-key";
const TICK_MS = 1000 / (Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100);
const round = (x, d = 1) => (x == null ? null : +x.toFixed(d));

/** The broker's user + system CPU time so far, in ms. */
function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** One POST /v1/graphql with the sample key. */
async function gql(http, query, variables = {}) {
  const t0 = performance.now();
  const r = await fetch(`${http}/v1/graphql`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify({ query, variables }),
    signal: AbortSignal.timeout(120000),
  });
  const text = await r.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {}
  return {
    status: r.status,
    bytes: text.length,
    ms: performance.now() - t0,
    remaining: Number(r.headers.get("x-ratelimit-remaining")),
    cost: body?.extensions?.rateLimit?.cost ?? null,
    code: body?.errors?.[0]?.extensions?.code ?? null,
    body,
  };
}

/** Probes /healthz every 20 ms until the returned function is called. */
function probeHealth(http) {
  const lat = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const t0 = performance.now();
      try {
        await fetch(`${http}/healthz`, { signal: AbortSignal.timeout(60000) });
      } catch {}
      lat.push(performance.now() - t0);
      await sleep(20);
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    return { samples: lat.length, medianMs: round(median(lat)), maxMs: round(Math.max(...lat)) };
  };
}

/** Runs `one` back to back for `ms`: counts, statuses, bytes, cost and CPU per request. */
async function loopFor(b, ms, one) {
  const cpu0 = cpuMs(b.child.pid);
  const statuses = {};
  let n = 0;
  let bytes = 0;
  let cost = 0;
  let last;
  const until = Date.now() + ms;
  while (Date.now() < until) {
    last = await one();
    n++;
    bytes += last.bytes;
    cost += last.cost ?? 0;
    statuses[last.status] = (statuses[last.status] ?? 0) + 1;
  }
  return {
    requests: n,
    statuses,
    code: last?.code ?? null,
    bytesPerRequest: Math.round(bytes / n),
    unitsPerRequest: round(cost / n, 2),
    cpuMsPerRequest: round((cpuMs(b.child.pid) - cpu0) / n, 2),
    remainingAtEnd: last?.remaining ?? null,
  };
}

/** `{ ...F0 }`, each of `levels` fragments spreading the next twice: 2^levels `__typename`s. */
const chain = (levels) => {
  let q = "{ ...F0 } ";
  for (let i = 0; i < levels; i++) q += `fragment F${i} on Query { ...F${i + 1} ...F${i + 1} } `;
  return q + `fragment F${levels} on Query { __typename }`;
};

const aliases = (n, field) => `{${Array.from({ length: n }, (_, i) => ` a${i}:${field}`).join("")} }`;

/** A broker with `patch` (an older binary is handed the config without
 * the keys it does not know: `startBroker`). */
const start = (patch = (c) => c) => startBroker(patch);

const richBudget = (c) =>
  c.replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n").replace("account_burst = 200\n", "account_burst = 100000\n");

/** The channel's seq, read once the key's bucket lets the read through (an
 * attack that emptied it gets RATE_LIMITED, which is no seq). */
async function seqOf(http, channel) {
  for (let tries = 0; tries < 50; tries++) {
    const r = await gql(http, `{ channel(name: "${channel}") { seq } }`);
    const seq = r.body?.data?.channel?.seq;
    if (typeof seq === "number") return seq;
    await sleep(200);
  }
  throw new Error(`no seq for ${channel} after 10 s`);
}

// ---- the attacks ----------------------------------------------------------

/** High 1: fragments that spread the next twice, at growing depth, on one worker. */
export async function graphqlFragments() {
  const b = await start((c) => c.replace("workers = 0\n", "workers = 1\n"));
  try {
    const perLevel = [];
    for (const levels of [8, 12, 16, 18, 20, 22]) {
      const doc = chain(levels);
      const cpu0 = cpuMs(b.child.pid);
      const r = await gql(b.http, doc);
      perLevel.push({ levels, docBytes: doc.length, status: r.status, code: r.code, cost: r.cost, ms: round(r.ms), cpuMs: round(cpuMs(b.child.pid) - cpu0) });
    }
    const probe = probeHealth(b.http);
    await sleep(100);
    const cpu0 = cpuMs(b.child.pid);
    const two = await Promise.all([gql(b.http, chain(22)), gql(b.http, chain(22))]);
    const cpu = cpuMs(b.child.pid) - cpu0;
    const health = await probe();
    return {
      perLevel,
      twoAt22Levels: { statuses: two.map((r) => r.status), codes: two.map((r) => r.code), ms: two.map((r) => round(r.ms)), cpuMs: round(cpu) },
      healthzDuringTwo: health,
    };
  } finally {
    stop(b);
  }
}

/** High 2: @skip(if: $s) with `$s: Boolean = true` not sent. */
export async function graphqlSkipDefault() {
  const b = await start(richBudget);
  try {
    await publishHistory(b.http, "doc:skip", 20, "x".repeat(16 * 1024));
    const reads = Array.from({ length: 20 }, (_, i) => ` a${i}: channel(name: "doc:skip") { history(last: 20) @skip(if: $s) { data } }`).join("");
    const read = await gql(b.http, `query($s: Boolean = true) {${reads} }`);
    const writes = Array.from({ length: 300 }, (_, i) => ` p${i}: publish(channel: "doc:skipm", data: ${i}) @skip(if: $s) { seq }`).join("");
    await publishHistory(b.http, "doc:skipm", 1, 0); // a position to count from
    const before = await seqOf(b.http, "doc:skipm");
    const write = await gql(b.http, `mutation($s: Boolean = true) {${writes} }`);
    const after = await seqOf(b.http, "doc:skipm");
    return {
      twentyHistoryReads: { status: read.status, bytes: read.bytes, cost: read.cost },
      threeHundredPublishes: { status: write.status, cost: write.cost, published: after - before },
    };
  } finally {
    stop(b);
  }
}

/** High 3: publishBatch(messages: {...}) one object, aliased, as fast as answered. */
export async function graphqlBatchObject() {
  const b = await start();
  try {
    const m = { channel: "doc:bo", data: "x".repeat(16 * 1024) };
    await publishHistory(b.http, "doc:bo", 1, 0); // a position to count from
    const doc = (n) => `mutation($m: [PublishInput!]!) {${Array.from({ length: n }, (_, i) => ` b${i}: publishBatch(messages: $m) { seq }`).join("")} }`;
    const out = {};
    for (const n of [400, 50]) {
      const before = await seqOf(b.http, "doc:bo");
      const ms = 3000;
      const run = await loopFor(b, ms, () => gql(b.http, doc(n), { m }));
      const after = await seqOf(b.http, "doc:bo");
      const published = after - before;
      out[`aliases${n}`] = { ...run, publishesPerSec: Math.round(published / (ms / 1000)) };
    }
    return out;
  } finally {
    stop(b);
  }
}

/** High 4: zero-weight aliases (`prices`, `budget`) at any rate; /healthz meanwhile. */
export async function graphqlZeroAliases() {
  const b = await start();
  try {
    const probe = probeHealth(b.http);
    const prices3200 = await loopFor(b, 3000, () => gql(b.http, aliases(3200, "prices{json}")));
    const prices250 = await loopFor(b, 3000, () => gql(b.http, aliases(250, "prices{json}")));
    const budget250 = await loopFor(b, 2000, () => gql(b.http, aliases(250, "budget{remaining}")));
    return { prices3200, prices250, budget250, healthz: await probe() };
  } finally {
    stop(b);
  }
}

/** High 4: introspection nested past the depth limit; a deep one within it. */
export async function graphqlIntrospection() {
  const b = await start();
  try {
    const ofType = `{ __type(name: "Channel") { ${"ofType { ".repeat(12)} name ${"}".repeat(12)} } }`;
    const deep = await gql(b.http, ofType);
    // Depth 10: every type's fields' types' fields' ... (the widest answer within the limits).
    const wide = await gql(b.http, "{ __schema { types { fields { type { fields { type { fields { type { fields { name } } } } } } } } } }");
    return {
      thirteenLevels: { status: deep.status, code: deep.code, cost: deep.cost, bytes: deep.bytes },
      tenLevelsWide: { status: wide.status, code: wide.code, cost: wide.cost, bytes: wide.bytes, ms: round(wide.ms) },
    };
  } finally {
    stop(b);
  }
}

/** Medium: history priced per message; the same bytes through socket recovery cost recovery_per_kib per KiB. */
export async function graphqlHistoryBytes() {
  const b = await start((c) => c.replace("account_burst = 200\n", "account_burst = 5000\n"));
  try {
    await publishHistory(b.http, "doc:hb", 50, "x".repeat(16 * 1024));
    const out = {};
    for (const last of [50, 10]) {
      const r = await gql(b.http, `{ channel(name: "doc:hb") { history(last: ${last}) { seq data } } }`);
      out[`last${last}`] = { status: r.status, code: r.code, bytes: r.bytes, cost: r.cost, unitsPerMiB: r.cost && r.bytes ? round(r.cost / (r.bytes / 1048576)) : null };
    }
    const aliased = await gql(b.http, `{ channel(name: "doc:hb") { history(last: 10) { a: data b: data c: data } } }`);
    out.last10ThreeAliases = { status: aliased.status, bytes: aliased.bytes, cost: aliased.cost };
    out.socketRecoveryUnitsPerMiB = 1024; // recovery_per_kib = 1 as shipped
    return out;
  } finally {
    stop(b);
  }
}

/** Medium: a subscription selecting `data` under 20 aliases; one 60 KiB publish. */
export async function graphqlSubscriptionAliases() {
  const b = await start();
  try {
    const ws = new WebSocket(`ws://127.0.0.1:${b.port}/v1/graphql`, ["graphql-transport-ws"]);
    let received = 0;
    let first = null;
    const acked = new Promise((resolve, reject) => {
      ws.on("message", (d) => {
        const m = JSON.parse(d.toString());
        if (m.type === "connection_ack") return resolve();
        if (m.id === "s") {
          received += d.length;
          first ??= { type: m.type, code: m.payload?.[0]?.extensions?.code ?? null };
        }
      });
      ws.once("error", reject);
    });
    await new Promise((r) => ws.once("open", r));
    ws.send(JSON.stringify({ type: "connection_init", payload: { authorization: `Bearer ${KEY}` } }));
    await acked;
    const sel = Array.from({ length: 20 }, (_, i) => `d${i}: data`).join(" ");
    ws.send(JSON.stringify({ type: "subscribe", id: "s", payload: { query: `subscription { messages(channel: "doc:sa") { seq ${sel} } }` } }));
    await sleep(300);
    const data = "x".repeat(60 * 1024);
    await publishHistory(b.http, "doc:sa", 1, data);
    await sleep(1000);
    ws.terminate();
    return { publishedBytes: data.length + 2, firstAnswer: first, bytesDelivered: received };
  } finally {
    stop(b);
  }
}

/** Medium: refusals before the charge, and channels(first: 0) over many channels. */
export async function graphqlRefusals() {
  const b = await start(richBudget);
  try {
    // 20,000 channels, each holding one message (batches of 100).
    for (let i = 0; i < 200; i++) {
      const messages = Array.from({ length: 100 }, (_, k) => ({ channel: `scan:${i * 100 + k}`, data: 1 }));
      await fetch(`${b.http}/v1/publish/batch`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ messages }),
      });
    }
    const parse = await loopFor(b, 2000, () => gql(b.http, "{"));
    const invalid = await loopFor(b, 2000, () => gql(b.http, "{ noSuchField }"));
    const first0 = await loopFor(b, 2000, () => gql(b.http, '{ channels(prefix: "", first: 0) { name } }'));
    const first1 = await loopFor(b, 2000, () => gql(b.http, '{ channels(prefix: "", first: 1) { name } }'));
    return { parseErrors: parse, validationErrors: invalid, channelsFirst0: first0, channelsFirst1: first1 };
  } finally {
    stop(b);
  }
}

/** Every GraphQL attack, by the name bounds-attacks.mjs lists it under. */
export const graphqlAttacks = {
  "graphql-fragments": graphqlFragments,
  "graphql-skip-default": graphqlSkipDefault,
  "graphql-batch-object": graphqlBatchObject,
  "graphql-zero-aliases": graphqlZeroAliases,
  "graphql-introspection": graphqlIntrospection,
  "graphql-history-bytes": graphqlHistoryBytes,
  "graphql-subscription-aliases": graphqlSubscriptionAliases,
  "graphql-refusals": graphqlRefusals,
};
