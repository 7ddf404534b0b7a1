// Pusher's watchlists and user authentication timeout (§16) with the
// ecosystem's own libraries, unchanged: the `pusher` library's
// `authenticateUser` signs a `user_data` with a `watchlist`, and pusher-js 8
// emits `online`/`offline` on `pusher.user.watchlist` (first the
// watchlist's state, then who comes and goes). An app with
// `user_authentication_timeout_s` closes a connection that never signs in
// (4009; pusher-js then stays disconnected), not one that did.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startBroker } from "../lib/broker.mjs";
import { SAMPLE_APP as APP, connected, pusherServer } from "../lib/pusher.mjs";
// A second app whose connections must sign in within a second.
const STRICT = { appId: "5678", key: "strict-key", secret: "strict-app-secret-0123456789" };
const EXTRA = `
[[pusher.apps]]
id = "${STRICT.appId}"
key = "${STRICT.key}"
secret = "${STRICT.secret}"
account = "acme"
user_authentication_timeout_s = 1
`;

let broker;
let port;
const clients = [];
const serverOf = (app) => pusherServer(app, port);

before(async () => {
  broker = await startBroker({}, EXTRA);
  port = Number(new URL(broker.url).port);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await broker?.stop();
});

/** A connected pusher-js client of `app` whose sign-ins authenticate as `user` watching `watchlist`. */
function client(app, user, watchlist = []) {
  const signer = serverOf(app);
  return connected(app, port, clients, {
    userAuthentication: {
      customHandler: ({ socketId }, callback) =>
        callback(null, signer.authenticateUser(socketId, { id: user, watchlist })),
    },
  });
}

/** Every watchlist event `c` gets, in order, and a way to wait for the next. */
function watch(c) {
  const seen = [];
  let wake = null;
  const on = (e) => {
    seen.push({ name: e.name, user_ids: e.user_ids });
    wake?.();
  };
  c.user.watchlist.bind("online", on);
  c.user.watchlist.bind("offline", on);
  return {
    async next() {
      while (seen.length === 0) await new Promise((ok) => (wake = ok));
      return seen.shift();
    },
  };
}

/** Signs `c` in and waits until its `#server-to-user-` channel is subscribed. */
async function signedIn(c) {
  c.signin();
  await c.user.signinDonePromise;
  const ch = c.user.serverToUserChannel;
  assert.ok(ch, "pusher-js did not finish the sign-in");
  if (!ch.subscribed) await new Promise((ok) => ch.bind("pusher:subscription_succeeded", ok));
  return c;
}

test("pusher.user.watchlist is told its state, then who comes online and goes offline", async () => {
  const bob = await signedIn(await client(APP, "bob"));
  const ann = await client(APP, "ann", ["bob", "cid"]);
  const events = watch(ann);
  await signedIn(ann);
  assert.deepEqual(await events.next(), { name: "online", user_ids: ["bob"] });
  assert.deepEqual(await events.next(), { name: "offline", user_ids: ["cid"] });
  const cid1 = await signedIn(await client(APP, "cid"));
  assert.deepEqual(await events.next(), { name: "online", user_ids: ["cid"] });
  // A second tab is no news; the last one closing is.
  const cid2 = await signedIn(await client(APP, "cid"));
  cid1.disconnect();
  cid2.disconnect();
  assert.deepEqual(await events.next(), { name: "offline", user_ids: ["cid"] });
  bob.disconnect();
  assert.deepEqual(await events.next(), { name: "offline", user_ids: ["bob"] });
  ann.disconnect();
});

test("an app's user_authentication_timeout_s closes a connection that never signs in, 4009", async () => {
  const signed = await signedIn(await client(STRICT, "ann"));
  const idle = await client(STRICT, "nobody");
  const closed = new Promise((ok) =>
    idle.connection.bind("state_change", (s) => s.current === "disconnected" && ok()),
  );
  await closed;
  // Opened first, its timeout rang first: signed in, it stays.
  assert.equal(signed.connection.state, "connected");
  const echoed = new Promise((ok) => signed.user.bind("note", ok));
  await serverOf(STRICT).sendToUser("ann", "note", { still: "here" });
  assert.deepEqual(await echoed, { still: "here" });
  signed.disconnect();
});
