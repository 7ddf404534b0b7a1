// The Pusher Channels protocol (§16) with the ecosystem's own libraries,
// unchanged, against the release broker and the shipped config's sample
// app: pusher-js 8 (its Node build) subscribes and sends client events,
// the `pusher` server library triggers, signs channel authorizations and
// reads channel info over the HTTP API.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startBroker } from "../lib/broker.mjs";
import { SAMPLE_APP as APP, authorizedBy, connected, next, pusherServer, subscribed } from "../lib/pusher.mjs";

let broker;
let server;
let port;
const clients = [];
before(async () => {
  broker = await startBroker();
  port = Number(new URL(broker.url).port);
  server = pusherServer(APP, port);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await broker?.stop();
});

/** A pusher-js client of the sample app, authorized by the server library, once connected. */
const client = () => connected(APP, port, clients, authorizedBy(server));

test("pusher-js gets what the pusher library triggers, and a socket_id is left out", async () => {
  const a = await client();
  const b = await client();
  assert.match(a.connection.socket_id, /^\d+\.\d+$/);
  const cha = await subscribed(a, "news");
  const chb = await subscribed(b, "news");
  const gotA = next(cha, "update");
  const gotB = next(chb, "update");
  const res = await server.trigger("news", "update", { headline: "tide" }, { socket_id: a.connection.socket_id });
  assert.equal(res.status, 200);
  assert.deepEqual(await gotB, { headline: "tide" });
  // a was left out: the next event it sees is the one after.
  await server.trigger("news", "update", { headline: "second" });
  assert.deepEqual(await gotA, { headline: "second" });
});

test("private channels: the library's authorization admits, client events reach the others only", async () => {
  const a = await client();
  const b = await client();
  const cha = await subscribed(a, "private-room");
  const chb = await subscribed(b, "private-room");
  const echoed = [];
  cha.bind("client-typing", (d) => echoed.push(d));
  const got = next(chb, "client-typing");
  assert.equal(cha.trigger("client-typing", { who: "a" }), true);
  assert.deepEqual(await got, { who: "a" });
  // The sender's own next event is the server's, not its echo.
  const after = next(cha, "done");
  await server.trigger("private-room", "done", {});
  await after;
  assert.deepEqual(echoed, []);
});

test("the library reads channel info, and a wrong secret is refused with 401", async () => {
  const a = await client();
  await subscribed(a, "info-room");
  const res = await server.get({ path: "/channels/info-room", params: { info: "subscription_count" } });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { occupied: true, subscription_count: 1 });
  const forged = pusherServer(APP, port, "not-the-apps-secret");
  await assert.rejects(forged.trigger("info-room", "x", {}), (e) => e.status === 401);
});

test("a forged channel authorization is refused with a subscription_error 401", async () => {
  const c = await connected(APP, port, clients, {
    channelAuthorization: {
      customHandler: (_p, callback) => callback(null, { auth: `${APP.key}:${"0".repeat(64)}` }),
    },
  });
  const ch = c.subscribe("private-locked");
  const err = await next(ch, "pusher:subscription_error");
  assert.equal(err.status, 401);
});

/** The first event pusher-js emits on `ch` that is not its own `pusher:` bookkeeping, or a cache miss. */
const firstEvent = (ch) =>
  new Promise((ok) =>
    ch.bind_global((event, data) => {
      if (event === "pusher:cache_miss" || !event.startsWith("pusher:")) ok({ event, data });
    }),
  );

test("cache channels: pusher-js emits pusher:cache_miss, and a later subscriber gets the last event first", async () => {
  const a = await client();
  const first = firstEvent(a.subscribe("cache-weather"));
  assert.deepEqual(await first, { event: "pusher:cache_miss", data: {} });
  await server.trigger("cache-weather", "forecast", { sky: "grey" });
  await server.trigger("cache-weather", "forecast", { sky: "clear" });
  const b = await client();
  const chb = b.subscribe("cache-weather");
  assert.deepEqual(await firstEvent(chb), { event: "forecast", data: { sky: "clear" } });
  // Then live, as on any channel.
  const live = next(chb, "forecast");
  await server.trigger("cache-weather", "forecast", { sky: "rain" });
  assert.deepEqual(await live, { sky: "rain" });
  // (The sample app's plan caps connections: these two make room.)
  a.disconnect();
  b.disconnect();
  // A private cache channel replays after the library's authorization.
  await server.trigger("private-cache-doc", "state", { v: 7 });
  const c = await client();
  assert.deepEqual(await firstEvent(c.subscribe("private-cache-doc")), { event: "state", data: { v: 7 } });
});
