// A Pusher app's webhooks (§16) verified by the `pusher` server library's
// own verifier (`pusher.webhook({headers, rawBody})`: isValid, getEvents),
// from a node:http receiver, while pusher-js subscribes, sends a client
// event and meets a cache miss.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { startBroker } from "../lib/broker.mjs";
import { authorizedBy, connected, pusherServer, subscribed } from "../lib/pusher.mjs";

const APP = { appId: "5678", key: "hooks-key", secret: "hooks-app-secret-0123456789" };

let broker;
let server;
let port;
let receiver;
const clients = [];
/** Verified events, in arrival order, and who waits for the next. */
const events = [];
let waiting = null;

before(async () => {
  receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const hook = server.webhook({ headers: req.headers, rawBody: Buffer.concat(chunks).toString("utf8") });
      assert.ok(hook.isValid(), "the library verifies the signature");
      events.push(...hook.getEvents());
      waiting?.();
      res.writeHead(200).end();
    });
  });
  await new Promise((ok) => receiver.listen(0, "127.0.0.1", ok));
  const url = `http://127.0.0.1:${receiver.address().port}/pusher`;
  broker = await startBroker(
    {},
    `
[[pusher.apps]]
id = "${APP.appId}"
key = "${APP.key}"
secret = "${APP.secret}"
account = "acme"
client_events = true
webhooks = [{ url = "${url}", vacated_delay_ms = 200, events = ["channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event", "cache_miss"] }]
`,
  );
  port = Number(new URL(broker.url).port);
  server = pusherServer(APP, port);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await broker?.stop();
  receiver?.close();
});

/** Waits until `n` events have arrived; returns them sorted by name and channel. */
async function received(n) {
  while (events.length < n) await new Promise((ok) => (waiting = ok));
  const got = events.splice(0, n);
  return got.sort((a, b) => `${a.name} ${a.channel}`.localeCompare(`${b.name} ${b.channel}`));
}

/** A pusher-js client of the app, user `userId` on presence channels, once connected. */
const client = (userId) =>
  connected(APP, port, clients, authorizedBy(server, (name) => (name.startsWith("presence-") ? { user_id: userId, user_info: {} } : undefined)));

test("the pusher library verifies every webhook, and each event says what happened", async () => {
  const a = await client("ann");
  const b = await client("bob");
  const cha = await subscribed(a, "private-room");
  await subscribed(b, "private-room");
  assert.deepEqual(await received(1), [{ name: "channel_occupied", channel: "private-room" }]);
  cha.trigger("client-typing", { who: "ann" });
  const [typing] = await received(1);
  assert.deepEqual(typing, {
    name: "client_event",
    channel: "private-room",
    event: "client-typing",
    data: JSON.stringify({ who: "ann" }),
    socket_id: a.connection.socket_id,
  });
  a.subscribe("cache-score");
  assert.deepEqual(await received(2), [
    { name: "cache_miss", channel: "cache-score", socket_id: a.connection.socket_id },
    { name: "channel_occupied", channel: "cache-score" },
  ]);
  await subscribed(b, "presence-room");
  assert.deepEqual(await received(2), [
    { name: "channel_occupied", channel: "presence-room" },
    { name: "member_added", channel: "presence-room", user_id: "bob" },
  ]);
  b.unsubscribe("presence-room");
  assert.deepEqual(await received(2), [
    { name: "channel_vacated", channel: "presence-room" },
    { name: "member_removed", channel: "presence-room", user_id: "bob" },
  ]);
});
