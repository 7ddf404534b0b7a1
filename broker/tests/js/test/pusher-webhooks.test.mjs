// A Pusher app's webhooks (§16) verified by the `pusher` server library's
// own verifier (`pusher.webhook({headers, rawBody})`: isValid, getEvents),
// from a node:http receiver, while pusher-js subscribes, sends a client
// event and meets a cache miss.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import PusherJsModule from "pusher-js";
import PusherServer from "pusher";
import { startBroker } from "../lib/broker.mjs";

const PusherJs = PusherJsModule.default ?? PusherJsModule;
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
  server = new PusherServer({ ...APP, host: "127.0.0.1", port: String(port), useTLS: false });
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

async function client(userId) {
  const c = new PusherJs(APP.key, {
    cluster: "mt1",
    wsHost: "127.0.0.1",
    wsPort: port,
    forceTLS: false,
    enabledTransports: ["ws"],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) =>
        callback(
          null,
          channelName.startsWith("presence-")
            ? server.authorizeChannel(socketId, channelName, { user_id: userId, user_info: {} })
            : server.authorizeChannel(socketId, channelName),
        ),
    },
  });
  clients.push(c);
  await new Promise((ok) => c.connection.bind("connected", ok));
  return c;
}

function subscribed(c, name) {
  const ch = c.subscribe(name);
  return new Promise((ok) => ch.bind("pusher:subscription_succeeded", () => ok(ch)));
}

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
