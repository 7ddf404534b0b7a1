// Pusher's user authentication (§16) with the ecosystem's own libraries,
// unchanged: pusher-js 8 (its Node build) signs in with what the `pusher`
// library's `authenticateUser` signs, gets `sendToUser`'s events through
// `user.bind`, is closed by `terminateUserConnections`, and meets the app's
// `user_max_connections` (4004). A forged sign-in is `pusher:error` 4009.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startBroker } from "../lib/broker.mjs";
import { SAMPLE_APP as APP, connected, pusherServer } from "../lib/pusher.mjs";
// A second app whose users may hold one connection each.
const CAPPED = { appId: "5678", key: "capped-key", secret: "capped-app-secret-0123456789" };
const EXTRA = `
[[pusher.apps]]
id = "${CAPPED.appId}"
key = "${CAPPED.key}"
secret = "${CAPPED.secret}"
account = "acme"
user_max_connections = 1
`;

let broker;
let port;
const clients = [];
const serverOf = (app, secret) => pusherServer(app, port, secret);

before(async () => {
  broker = await startBroker({}, EXTRA);
  port = Number(new URL(broker.url).port);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await broker?.stop();
});

/** A pusher-js client of `app` whose sign-ins `signer` (a `pusher` library) authenticates as `user`, once connected. */
const client = (app, signer, user) =>
  connected(app, port, clients, {
    userAuthentication: {
      customHandler: ({ socketId }, callback) =>
        callback(null, signer.authenticateUser(socketId, { id: user, name: `name of ${user}` })),
    },
  });

/** Signs `c` in and waits until its `#server-to-user-` channel is subscribed. */
async function signedIn(c) {
  c.signin();
  await c.user.signinDonePromise;
  const ch = c.user.serverToUserChannel;
  assert.ok(ch, "pusher-js did not finish the sign-in");
  if (!ch.subscribed) await new Promise((ok) => ch.bind("pusher:subscription_succeeded", ok));
  return c;
}

const pusherError = (c) =>
  new Promise((ok) => c.connection.bind("error", (e) => e.type === "PusherError" && ok(e.data)));
const leaves = (c, state) => new Promise((ok) => c.connection.bind("state_change", (s) => s.current === state && ok()));

test("a signed-in pusher-js user gets what sendToUser sends, on every connection of that user only", async () => {
  const server = serverOf(APP);
  const ann1 = await signedIn(await client(APP, server, "ann"));
  const ann2 = await signedIn(await client(APP, server, "ann"));
  const bob = await signedIn(await client(APP, server, "bob"));
  assert.equal(ann1.user.user_data.id, "ann");
  assert.equal(ann1.user.user_data.name, "name of ann");
  const got1 = new Promise((ok) => ann1.user.bind("note", ok));
  const got2 = new Promise((ok) => ann2.user.bind("note", ok));
  const bobs = [];
  bob.user.bind("note", (d) => bobs.push(d));
  const res = await server.sendToUser("ann", "note", { text: "hello ann" });
  assert.equal(res.status, 200);
  assert.deepEqual(await got1, { text: "hello ann" });
  assert.deepEqual(await got2, { text: "hello ann" });
  // Bob's next note is his own: ann's never reached him.
  const bobsOwn = new Promise((ok) => bob.user.bind("note", ok));
  await server.sendToUser("bob", "note", { text: "hello bob" });
  assert.deepEqual(await bobsOwn, { text: "hello bob" });
  assert.deepEqual(bobs, [{ text: "hello bob" }]);
  for (const c of [ann1, ann2, bob]) c.disconnect();
});

test("a sign-in the app's secret did not sign is pusher:error 4009, and the client stays signed out", async () => {
  const forged = serverOf(APP, "not-the-apps-secret-at-all");
  const c = await client(APP, forged, "mallory");
  const err = pusherError(c);
  c.signin();
  assert.equal((await err).code, 4009);
  assert.equal(c.user.user_data, null);
  assert.equal(c.connection.state, "connected");
  c.disconnect();
});

test("terminateUserConnections closes that user's connections and no one else's", async () => {
  const server = serverOf(APP);
  const cid1 = await signedIn(await client(APP, server, "cid"));
  const cid2 = await signedIn(await client(APP, server, "cid"));
  const dan = await signedIn(await client(APP, server, "dan"));
  // 4100: pusher-js backs off, then reconnects (and signs in again).
  const gone = [leaves(cid1, "connecting"), leaves(cid2, "connecting")];
  const res = await server.terminateUserConnections("cid");
  assert.equal(res.status, 200);
  await Promise.all(gone);
  cid1.disconnect();
  cid2.disconnect();
  assert.equal(dan.connection.state, "connected");
  const note = new Promise((ok) => dan.user.bind("note", ok));
  await server.sendToUser("dan", "note", { still: "here" });
  assert.deepEqual(await note, { still: "here" });
  dan.disconnect();
});

test("past user_max_connections the newest connection gets pusher:error 4004 and is closed for good", async () => {
  const server = serverOf(CAPPED);
  const first = await signedIn(await client(CAPPED, server, "eve"));
  const second = await client(CAPPED, server, "eve");
  const err = pusherError(second);
  const closed = leaves(second, "disconnected");
  second.signin();
  assert.equal((await err).code, 4004);
  await closed;
  assert.equal(first.connection.state, "connected");
  first.disconnect();
});
