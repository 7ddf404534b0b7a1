#!/usr/bin/env node
// The chat from a terminal: two Laravel Echo clients (pusher-js's Node
// build) join the room through server.mjs's authorization, see each other
// arrive, whisper that they are typing, get the message the server
// triggers, and see the other leave. Needs the broker and server.mjs
// running:
//
//   node examples/pusher/demo.mjs [http://127.0.0.1:9100] [--private]
//
// --private uses `private-chat` instead of `presence-chat`: whispers and
// messages, no member list (for a broker that refuses presence channels).
import Echo from "laravel-echo";
import PusherJsModule from "pusher-js";

const Pusher = PusherJsModule.default ?? PusherJsModule;
const args = process.argv.slice(2);
const server = args.find((a) => !a.startsWith("--")) ?? "http://127.0.0.1:9100";
const presence = !args.includes("--private");
const channel = presence ? "presence-chat" : "private-chat";
const WAIT_MS = 5000; // what each step may take before the demo gives up and says which

async function post(path, body, token) {
  const res = await fetch(`${server}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  const value = await res.json();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${value.error}`);
  return value;
}

/** What one user's Echo heard, in order; `next(kind)` takes the next of a kind, waiting for it. */
class Inbox {
  #events = []; // bounded by the demo's few steps
  #wakers = new Set(); // the next() calls waiting, one per pending step
  constructor(name) {
    this.name = name;
  }
  push(kind, data) {
    this.#events.push({ kind, data });
    for (const wake of this.#wakers) wake();
  }
  async next(kind) {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      // A refusal of the subscription ends every wait: nothing else will come.
      const at = this.#events.findIndex((e) => e.kind === kind || e.kind === "refused");
      if (at >= 0) {
        const { kind: got, data } = this.#events[at];
        if (got === "refused") throw new Error(`${this.name}: ${channel} refused ${data.status} (${data.error ?? data.type})`);
        this.#events.splice(at, 1);
        return data;
      }
      if (Date.now() >= deadline) throw new Error(`${this.name}: no ${kind} within ${WAIT_MS} ms`);
      await new Promise((wake) => {
        const done = () => {
          clearTimeout(timer);
          this.#wakers.delete(done);
          wake();
        };
        const timer = setTimeout(done, deadline - Date.now());
        this.#wakers.add(done);
      });
    }
  }
}

/** A user of the chat: a bearer token from the server, then Echo as a Laravel app configures it. */
async function join(name) {
  const { token } = await post("/tokens", { name });
  const config = await (await fetch(`${server}/echo.json`)).json();
  const echo = new Echo({
    broadcaster: "pusher",
    Pusher,
    key: config.key,
    cluster: "mt1",
    wsHost: config.wsHost,
    wsPort: config.wsPort,
    wssPort: config.wsPort,
    forceTLS: config.forceTLS,
    enabledTransports: ["ws", "wss"],
    disableStats: true,
    authEndpoint: `${server}/broadcasting/auth`,
    bearerToken: token, // Echo sends it as Authorization: Bearer to the auth endpoint
  });
  const inbox = new Inbox(name);
  const chat = presence ? echo.join("chat") : echo.private("chat");
  chat
    .subscribed(() => inbox.push("subscribed"))
    .error((e) => inbox.push("refused", e))
    .listen("MessageSent", (e) => inbox.push("message", e))
    .listenForWhisper("typing", (e) => inbox.push("typing", e));
  if (presence) {
    chat
      .here((users) => inbox.push("here", users))
      .joining((user) => inbox.push("joining", user))
      .leaving((user) => inbox.push("leaving", user));
  }
  return { name, token, echo, chat, inbox };
}

const names = (users) => users.map((u) => u.name).sort().join(", ");
const ann = await join("ann");
let bob;
try {
  // bob comes once ann is in: he sees both of them, she sees him join.
  if (presence) {
    console.log(`ann: here ${names(await ann.inbox.next("here"))}`);
    bob = await join("bob");
    const [here, joined] = await Promise.all([bob.inbox.next("here"), ann.inbox.next("joining")]);
    console.log(`bob: here ${names(here)}`);
    console.log(`ann: ${joined.name} joined`);
  } else {
    await ann.inbox.next("subscribed");
    bob = await join("bob");
    await bob.inbox.next("subscribed");
    console.log(`ann, bob: subscribed to ${channel} (no member list on a private channel)`);
  }

  bob.chat.whisper("typing", { name: "bob" });
  console.log(`ann: ${(await ann.inbox.next("typing")).name} is typing (client-typing, from bob's socket)`);

  const heard = Promise.all([ann.inbox.next("message"), bob.inbox.next("message")]);
  await post("/messages", { text: "hello bob", ...(presence ? {} : { channel }) }, ann.token);
  const [toAnn, toBob] = await heard;
  console.log(`bob: ${toBob.user.name} says "${toBob.text}" (MessageSent, the server's trigger)`);
  console.log(`ann: ${toAnn.user.name} says "${toAnn.text}" (her own, from the server too)`);

  if (presence) {
    bob.echo.leave("chat");
    console.log(`ann: ${(await ann.inbox.next("leaving")).name} left`);
  }
} catch (e) {
  console.error(e.message);
  process.exitCode = 1;
} finally {
  ann.echo.disconnect();
  bob?.echo.disconnect();
}
