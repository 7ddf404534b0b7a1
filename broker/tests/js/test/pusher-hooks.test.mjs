// §15's backend hooks on the Pusher front with the ecosystem's own
// libraries, unchanged: pusher-js 8 (its Node build) subscribes and sends
// client events; a backend (a plain Node HTTP server that verifies each
// call's Standard Webhooks signature) refuses a subscription, which
// pusher-js reports as `pusher:subscription_error` 403 with the hook's
// code, rewrites a client event's data, which the other pusher-js reads
// as the object the backend gave, and refuses one, which the sender gets
// as `pusher:error` 4301 and stays connected.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { startBroker } from "../lib/broker.mjs";
import { SAMPLE_APP as APP, authorizedBy, connected, pusherServer } from "../lib/pusher.mjs";

const HOOK_SECRET = "pusher-hook-secret-0123456789abcdef";

let broker;
let port;
let backend;
const calls = [];
const clients = [];
const server = pusherServer(APP, 1);

/** What a Standard Webhooks verifier checks. */
function verified(req, body) {
  const id = req.headers["webhook-id"];
  const ts = req.headers["webhook-timestamp"];
  const want = `v1,${createHmac("sha256", HOOK_SECRET).update(`${id}.${ts}.${body}`).digest("base64")}`;
  return Boolean(id && ts) && (req.headers["webhook-signature"] ?? "").split(" ").includes(want);
}

/** The backend: no on `private-doc-secret` and on `{"who":"no"}`, a rewrite of `{"who":"rewrite"}`. */
function answer(call) {
  if (call.event === "subscribe" && call.channel === "private-doc-secret") {
    return { error: { code: "not_member", message: "not a member of this document" } };
  }
  if (call.event === "publish" && call.data?.who === "no") {
    return { error: { code: "not_yours", message: "you may not type here" } };
  }
  if (call.event === "publish" && call.data?.who === "rewrite") {
    return { result: { data: { who: "the backend", n: call.data.n } } };
  }
  return { result: {} };
}

before(async () => {
  backend = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      assert.ok(verified(req, body), `an unsigned hook call: ${body}`);
      const call = JSON.parse(body);
      calls.push(call);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(answer(call)));
    });
  });
  await new Promise((ok) => backend.listen(0, "127.0.0.1", ok));
  const hook = `
[[hooks]]
id = "docs"
url = "http://127.0.0.1:${backend.address().port}/hook"
secret = "${HOOK_SECRET}"
events = ["subscribe", "publish"]
channels = ["private-doc-*"]
`;
  broker = await startBroker({}, hook);
  port = Number(new URL(broker.url).port);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await broker?.stop();
  await new Promise((ok) => backend?.close(ok));
});

const client = () => connected(APP, port, clients, authorizedBy(server));

/** Subscribes and resolves with `succeeded` or the `subscription_error`'s data. */
function subscribed(c, name) {
  const ch = c.subscribe(name);
  return new Promise((ok) => {
    ch.bind("pusher:subscription_succeeded", () => ok({ ch, ok: true }));
    ch.bind("pusher:subscription_error", (e) => ok({ ch, ok: false, error: e }));
  });
}

test("the subscribe hook refuses a channel: pusher-js gets subscription_error 403 with the hook's code", async () => {
  const c = await client();
  const open = await subscribed(c, "private-doc-open");
  assert.equal(open.ok, true);
  const call = calls.find((x) => x.event === "subscribe" && x.channel === "private-doc-open");
  assert.equal(call.client.transport, "pusher");
  assert.equal(call.client.connId, c.connection.socket_id);
  assert.deepEqual(call.client.info, { app: APP.appId });
  const secret = await subscribed(c, "private-doc-secret");
  assert.equal(secret.ok, false);
  assert.equal(secret.error.status, 403);
  assert.equal(secret.error.error, "not_member");
  assert.equal(c.connection.state, "connected");
});

test("the publish hook rewrites one client event and refuses another; the sender stays connected", async () => {
  const a = await client();
  const b = await client();
  const name = "private-doc-chat";
  const [sa, sb] = await Promise.all([subscribed(a, name), subscribed(b, name)]);
  assert.equal(sa.ok && sb.ok, true);
  const got = [];
  const three = new Promise((ok) => sb.ch.bind("client-typing", (d) => got.push(d) === 3 && ok()));
  const refused = new Promise((ok) => a.connection.bind("error", (e) => e.type === "PusherError" && ok(e.data)));
  assert.equal(sa.ch.trigger("client-typing", { who: "no" }), true);
  const err = await refused;
  assert.equal(err.code, 4301);
  assert.match(err.message, /not_yours/);
  for (let n = 0; n < 3; n++) sa.ch.trigger("client-typing", { who: "rewrite", n });
  await three;
  assert.deepEqual(got, [0, 1, 2].map((n) => ({ who: "the backend", n })), "rewritten, in the order sent, the refused one never sent");
  assert.equal(a.connection.state, "connected");
});
