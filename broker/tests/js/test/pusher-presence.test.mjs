// Pusher presence channels (§16 on §13's machinery) with the ecosystem's
// own libraries, unchanged, against the real broker and the shipped
// config's sample app: pusher-js 8's member list (count, me,
// member_added/removed, two tabs of one user as one member), the `pusher`
// server library's users and user_count reads, and Laravel Echo's
// `join().here().joining().leaving()` and whispers, authorized by the
// server library's `authorizeChannel` with presence data.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import Echo from "laravel-echo";
import { startBroker } from "../lib/broker.mjs";
import { SAMPLE_APP as APP, PusherJs, authorizedBy, connected, next, pusherServer, subscribed, wire } from "../lib/pusher.mjs";

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

/** A pusher-js client that is user `id` on presence channels, once connected. */
const client = (id) => connected(APP, port, clients, authorizedBy(server, () => ({ user_id: id, user_info: { name: `user ${id}` } })));

test("pusher-js keeps its member list: me, count, member_added and member_removed by user", async () => {
  const a = await client("1");
  const cha = await subscribed(a, "presence-lobby");
  assert.equal(cha.members.count, 1);
  assert.deepEqual(cha.members.me, { id: "1", info: { name: "user 1" } });

  const added = next(cha, "pusher:member_added");
  const b1 = await client("2");
  const chb = await subscribed(b1, "presence-lobby");
  assert.deepEqual(await added, { id: "2", info: { name: "user 2" } });
  assert.equal(cha.members.count, 2);
  assert.equal(chb.members.count, 2);
  assert.deepEqual(chb.members.get("1"), { id: "1", info: { name: "user 1" } });

  // User 2's second tab is no new member: the next thing `a` hears is user 3.
  const heard = [];
  cha.bind("pusher:member_added", (m) => heard.push(m.id));
  const b2 = await client("2");
  const chb2 = await subscribed(b2, "presence-lobby");
  assert.equal(chb2.members.count, 2);
  const third = next(cha, "pusher:member_added");
  const c = await client("3");
  await subscribed(c, "presence-lobby");
  await third;
  assert.deepEqual(heard, ["3"]);
  assert.equal(cha.members.count, 3);

  // The server library reads the users and their count.
  const users = await (await server.get({ path: "/channels/presence-lobby/users" })).json();
  assert.deepEqual(users, { users: [{ id: "1" }, { id: "2" }, { id: "3" }] });
  const info = await (await server.get({ path: "/channels/presence-lobby", params: { info: "user_count" } })).json();
  assert.deepEqual(info, { occupied: true, user_count: 3 });

  // User 2 leaves when its last tab does.
  const removed = next(cha, "pusher:member_removed");
  b1.disconnect();
  b2.disconnect();
  assert.deepEqual(await removed, { id: "2", info: { name: "user 2" } });
  assert.equal(cha.members.count, 2);
});

/** A Laravel Echo on pusher-js as user `id`, authorized by the server library. */
function echo(id, name) {
  const e = new Echo({
    broadcaster: "pusher",
    key: APP.key,
    ...wire(port),
    Pusher: PusherJs,
    authorizer: (channel) => ({
      authorize: (socketId, callback) =>
        callback(null, server.authorizeChannel(socketId, channel.name, { user_id: id, user_info: { id, name } })),
    }),
  });
  clients.push(e.connector.pusher);
  return e;
}

test("Laravel Echo: join().here().joining().leaving() and whispers", async () => {
  const ann = echo("10", "Ann");
  const annHere = new Promise((ok) => {
    ann.join("chat").here(ok);
  });
  assert.deepEqual(await annHere, [{ id: "10", name: "Ann" }]);
  const joining = new Promise((ok) => ann.join("chat").joining(ok));
  const leaving = new Promise((ok) => ann.join("chat").leaving(ok));
  const typing = new Promise((ok) => ann.join("chat").listenForWhisper("typing", ok));

  const bob = echo("11", "Bob");
  const bobHere = await new Promise((ok) => {
    bob.join("chat").here(ok);
  });
  assert.deepEqual(
    bobHere.sort((x, y) => x.id.localeCompare(y.id)),
    [
      { id: "10", name: "Ann" },
      { id: "11", name: "Bob" },
    ],
  );
  assert.deepEqual(await joining, { id: "11", name: "Bob" });

  bob.join("chat").whisper("typing", { name: "Bob" });
  assert.deepEqual(await typing, { name: "Bob" });

  bob.disconnect();
  assert.deepEqual(await leaving, { id: "11", name: "Bob" });
});
