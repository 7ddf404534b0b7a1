#!/usr/bin/env node
// The example backend's hooks from a terminal, with the SDK in Node: log in
// (a cookie), connect without a token, use the server-side channel, publish
// (the backend rewrites it), call an RPC, and see a hook's refusals as
// typed errors. Needs the broker (with hooks.toml) and backend.mjs running.
//
//   node examples/hooks/demo.mjs [ws://127.0.0.1:8080/v1/ws] [http://127.0.0.1:9000]
import WebSocket from "ws";
import { TidegateClient } from "../../client-sdk-ts/dist/index.js";

const broker = process.argv[2] ?? "ws://127.0.0.1:8080/v1/ws";
const backend = process.argv[3] ?? "http://127.0.0.1:9000";

/** A browser's handshake: the session cookie and the page's Origin. */
async function session(name) {
  const res = await fetch(`${backend}/login`, { method: "POST", body: JSON.stringify({ name }) });
  const cookie = res.headers.get("set-cookie")?.split(";")[0];
  const headers = { origin: backend, ...(cookie ? { cookie } : {}) };
  const Browserish = class extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols, { headers });
    }
  };
  // No token and no getToken: the connect hook reads the cookie.
  return new TidegateClient({ url: broker, WebSocket: Browserish, reconnect: false });
}

const refused = (e) => `${e.code} (${e.message})`;

const ann = await session("ann");
const welcome = await ann.connect();
console.log(`ann: joined ${welcome.channels.map((c) => c.channel ?? c).join(",")} at the handshake`);
console.log(`ann: whoami ${JSON.stringify(await ann.rpc("whoami"))}`);
const heard = new Promise((resolve) => ann.subscribe("room:lobby", resolve));
await ann.publish("room:lobby", { text: `  hello from ann ${"!".repeat(300)}` });
const msg = await heard;
console.log(`ann: room:lobby got ${msg.text.length} characters from ${msg.from} (the publish hook trimmed them)`);
await ann.publish("room:lobby", { text: "   " }).catch((e) => console.log(`ann: empty publish ${refused(e)}`));
await ann.subscribe("room:vip", () => {});
console.log("ann: subscribed to room:vip");

const bob = await session("bob");
await bob.connect();
await bob.subscribe("room:vip", () => {}).catch((e) => console.log(`bob: room:vip ${refused(e)}`));
await bob.rpc("fly").catch((e) => console.log(`bob: rpc fly ${refused(e)}`));

const nobody = new TidegateClient({ url: broker, WebSocket, reconnect: false });
await nobody.connect().catch((e) => console.log(`no cookie: connect ${refused(e)}, HTTP ${e.status}`));

for (const c of [ann, bob, nobody]) c.close();
