// examples/pusher, as a user runs it, against the release broker and the
// shipped config's sample app: server.mjs (the `pusher` library signs the
// channel authorizations and triggers the messages) and demo.mjs (two
// Laravel Echo clients on pusher-js's Node build) join the chat, see each
// other, whisper and get the server's message.
// (scripts/test installs the examples' packages first.)
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { REPO_ROOT, startBroker } from "../lib/broker.mjs";

const EXAMPLE = join(REPO_ROOT, "examples", "pusher");
let broker;
let server;

before(async () => {
  const { startServer } = await import(join(EXAMPLE, "server.mjs"));
  broker = await startBroker();
  server = await startServer({ port: 0, broker: broker.url });
});
after(async () => {
  await server?.stop();
  await broker?.stop();
});

const demo = (...args) =>
  promisify(execFile)(process.execPath, [join(EXAMPLE, "demo.mjs"), server.url, ...args], { timeout: 30_000 });

test("examples/pusher/demo.mjs: members, a whisper, the server's message and a leave on presence-chat", async () => {
  const { stdout } = await demo();
  assert.deepEqual(stdout.trim().split("\n"), [
    "ann: here ann",
    "bob: here ann, bob",
    "ann: bob joined",
    "ann: bob is typing (client-typing, from bob's socket)",
    'bob: ann says "hello bob" (MessageSent, the server\'s trigger)',
    'ann: ann says "hello bob" (her own, from the server too)',
    "ann: bob left",
  ]);
});

test("examples/pusher/demo.mjs --private: a whisper and the server's message on private-chat", async () => {
  const { stdout } = await demo("--private");
  assert.deepEqual(stdout.trim().split("\n"), [
    "ann, bob: subscribed to private-chat (no member list on a private channel)",
    "ann: bob is typing (client-typing, from bob's socket)",
    'bob: ann says "hello bob" (MessageSent, the server\'s trigger)',
    'ann: ann says "hello bob" (her own, from the server too)',
  ]);
});

test("the example's auth endpoint signs only for a session, and only the chat's channels", async () => {
  const post = (path, body, headers = {}) =>
    fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const form = { socket_id: "1.2", channel_name: "presence-chat" };
  assert.equal((await post("/broadcasting/auth", form)).status, 403, "no session, no signature");
  const { token } = await (await post("/tokens", { name: "ann" })).json();
  const auth = { authorization: `Bearer ${token}` };
  const signed = await (await post("/broadcasting/auth", form, auth)).json();
  assert.match(signed.auth, /^app-key:[0-9a-f]{64}$/);
  assert.deepEqual(JSON.parse(signed.channel_data), { user_id: "ann", user_info: { name: "ann" } });
  const other = await post("/broadcasting/auth", { ...form, channel_name: "presence-elsewhere" }, auth);
  assert.equal(other.status, 403);
  const user = await (await post("/broadcasting/user-auth", { socket_id: "1.2" }, auth)).json();
  assert.deepEqual(JSON.parse(user.user_data), { id: "ann", user_info: { name: "ann" } });
  assert.equal((await post("/messages", { text: "   " }, auth)).status, 400, "an empty message is not sent");
});
