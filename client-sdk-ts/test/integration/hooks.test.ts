/**
 * Backend hooks (PROTOCOL.md §15) through the SDK against the real broker
 * and a real HTTP backend in this file, which checks every call's Standard
 * Webhooks signature (the `standardwebhooks` package) and answers from a
 * table the tests set: a client without a token authenticated from its
 * cookie, the welcome's server-side channels, `rpc()`, a subscribe the
 * hook refuses, a publish it rewrites, an expiry it extends, and the
 * refusals (the hook's own code, `forbidden_origin`, `hook_unavailable`)
 * as typed errors.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import WebSocket from "ws";
import { Webhook } from "standardwebhooks";
import { TidegateClient } from "../../src/client.js";
import { TidegateError } from "../../src/errors.js";
import type { ClientOptions, Json } from "../../src/types.js";
import { brokerConfig, sdkClients, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";
import { nextEvent, settle } from "../helpers/events.js";

const SECRET = `whsec_${randomBytes(32).toString("base64")}`;
const ORIGIN = "http://app.example";

interface Call {
  id: string;
  event: string;
  client: { connId: string; transport: string; sub?: string };
  headers?: Record<string, string>;
  channel?: string;
  method?: string;
  data?: Json;
}

/** Every verified call, in order (a test file's calls bound it). */
const calls: Call[] = [];
let unsigned = 0;
/** The answer to each call; tests replace it. `undefined` answers 500 (a failure). */
let answer: (call: Call) => unknown = defaultAnswer;
let backend: Server;
let backendUrl = "";
let broker: Broker;
const clients = sdkClients(() => broker.wsUrl);

/** The latest call of `event`. */
function lastCall(event: string): Call {
  const found = calls.filter((x) => x.event === event).at(-1);
  assert.ok(found, `a ${event} call was made`);
  return found;
}

function defaultAnswer(call: Call): unknown {
  switch (call.event) {
    case "connect": {
      const user = /sid=(\w+)/.exec(call.headers?.cookie ?? "")?.[1];
      if (!user) return { error: { code: "login_required", message: "log in first" } };
      return { result: { sub: user, info: { name: user }, channels: [`user:${user}`] } };
    }
    case "subscribe":
      return call.channel === "app:secret"
        ? { error: { code: "not_a_member", message: "ask the owner", retryAfterMs: 1500 } }
        : { result: {} };
    case "publish":
      return { result: { data: { said: call.data, by: call.client.sub } } };
    case "rpc":
      return call.method === "add"
        ? { result: { data: ((call.data as number[]) ?? []).reduce((a, b) => a + b, 0) } }
        : { error: { code: "no_such_method", message: `no ${call.method}` } };
    default:
      return { result: {} };
  }
}

before(async () => {
  const verifier = new Webhook(SECRET);
  backend = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      let call: Call;
      try {
        call = verifier.verify(Buffer.concat(chunks).toString("utf8"), req.headers as Record<string, string>) as Call;
      } catch {
        unsigned += 1;
        return res.writeHead(401).end();
      }
      calls.push(call);
      const body = answer(call);
      if (body === undefined) return res.writeHead(500).end();
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => backend.listen(0, "127.0.0.1", resolve));
  backendUrl = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
  const hooks = [
    "",
    "[[hooks]]",
    'id = "app"',
    `url = "${backendUrl}/hook"`,
    'events = ["connect", "subscribe", "publish", "refresh", "rpc"]',
    'channels = ["app:*"]',
    `secret = "${SECRET}"`,
    "timeout_ms = 2000",
    `allowed_origins = ["${ORIGIN}"]`,
    "breaker_failures = 1000",
    "refresh_lead_ms = 2000",
  ].join("\n");
  broker = await startBroker(brokerConfig(TEST_BASE) + hooks);
});

after(async () => {
  clients.closeAll();
  await broker?.stop();
  await new Promise<void>((resolve) => backend?.close(() => resolve()));
});

/** A WebSocket that sends what a browser page would: the cookie and its Origin. */
function browserLike(headers: Record<string, string>): ClientOptions["WebSocket"] {
  return class extends WebSocket {
    constructor(url: string, protocols: string[]) {
      super(url, protocols, { headers });
    }
  };
}

function cookieClient(user: string | undefined, origin = ORIGIN, options: Partial<ClientOptions> = {}) {
  const headers: Record<string, string> = { origin };
  if (user) headers["cookie"] = `theme=dark; sid=${user}`;
  return clients.make({ WebSocket: browserLike(headers), transport: "websocket", ...options });
}

function refusal(r: { ok: boolean }): TidegateError {
  assert.equal(r.ok, false, "it was refused");
  const e = (r as unknown as { error: unknown }).error;
  assert.ok(e instanceof TidegateError, `a TidegateError, not ${String(e)}`);
  return e;
}

test("a client without a token connects with its cookie, and the hook's channels are its subscriptions", async () => {
  answer = defaultAnswer;
  const c = cookieClient("ann");
  const welcome = await c.connect();
  const connect = lastCall("connect");
  assert.equal(connect.headers?.cookie, "theme=dark; sid=ann");
  assert.equal(connect.headers?.origin, ORIGIN);
  assert.equal(connect.client.sub, undefined);
  assert.deepEqual(
    (welcome.channels ?? []).map((x) => (typeof x === "string" ? x : x.channel)),
    ["user:ann"],
  );
  const sub = c.subscription("user:ann");
  assert.ok(sub, "the server-side channel is a subscription");
  assert.equal(sub.server, true);
  assert.equal(sub.live, true);
  const subscribesBefore = calls.filter((x) => x.event === "subscribe").length;
  const got = new Promise<Json>((resolve) => void c.subscribe("user:ann", (data) => resolve(data)));
  const sent = await broker.publish("user:ann", { note: "for ann" });
  assert.equal(sent.status, 200);
  assert.deepEqual(await got, { note: "for ann" });
  assert.equal(sub.seq, sent.body.seq, "its position follows the messages");
  assert.equal(calls.filter((x) => x.event === "subscribe").length, subscribesBefore, "no subscribe call for it");
  assert.equal(unsigned, 0, "every call was signed");
});

test("rpc() resolves with the backend's data and rejects with its code", async () => {
  answer = defaultAnswer;
  const c = cookieClient("bob");
  await c.connect();
  assert.equal(await c.rpc("add", [1, 2, 39]), 42);
  const call = lastCall("rpc");
  assert.equal(call.method, "add");
  assert.deepEqual(call.data, [1, 2, 39]);
  assert.equal(call.client.sub, "bob");
  const e = refusal(await settle(c.rpc("fly", { to: "moon" })));
  assert.equal(e.code, "no_such_method");
  assert.equal(e.message, "no fly");
  assert.equal(e.temporary, false);
  assert.equal(c.state, "connected", "a refusal leaves the socket open");
});

test("a subscribe the hook refuses rejects with its code, message and retryAfterMs", async () => {
  answer = defaultAnswer;
  const c = cookieClient("cid");
  await c.connect();
  const e = refusal(await settle(c.subscribe("app:secret", () => undefined)));
  assert.equal(e.code, "not_a_member");
  assert.equal(e.message, "ask the owner");
  assert.equal(e.retryAfterMs, 1500);
  assert.equal(e.channel, "app:secret");
  const ok = await c.subscribe("app:open", () => undefined);
  assert.equal(ok.channel, "app:open");
});

test("a publish the hook rewrites reaches subscribers rewritten", async () => {
  answer = defaultAnswer;
  const reader = cookieClient("dee");
  const writer = cookieClient("eve");
  await Promise.all([reader.connect(), writer.connect()]);
  let heard!: (data: Json) => void;
  const got = new Promise<Json>((resolve) => (heard = resolve));
  await reader.subscribe("app:room", (data) => heard(data));
  const { seq } = await writer.publish("app:room", { text: "hi" });
  assert.ok(seq > 0);
  assert.deepEqual(await got, { said: { text: "hi" }, by: "eve" });
});

test("a connect hook's refusal ends connect() with its code; a foreign Origin never reaches the backend", async () => {
  answer = defaultAnswer;
  const anonymous = cookieClient(undefined);
  const e = refusal(await settle(anonymous.connect()));
  assert.equal(e.code, "login_required");
  assert.equal(e.message, "log in first");
  assert.equal(e.status, 403);
  assert.equal(anonymous.state, "closed", "nothing retries a refusal");

  const before = calls.length;
  const hijack = cookieClient("ann", "https://evil.example");
  const o = refusal(await settle(hijack.connect()));
  assert.equal(o.code, "forbidden_origin");
  assert.equal(o.status, 403);
  assert.equal(calls.length, before, "refused before the call");
});

test("a backend that fails: rpc rejects hook_unavailable (temporary), the handshake is retried after Retry-After", async () => {
  const c = cookieClient("fay");
  answer = defaultAnswer;
  await c.connect();
  answer = () => undefined; // 500: a failure, on_error = "deny"
  const e = refusal(await settle(c.rpc("add", [1])));
  assert.equal(e.code, "hook_unavailable");
  assert.equal(e.temporary, true);

  const d = cookieClient("gus", ORIGIN, { minReconnectDelayMs: 10, maxReconnectDelayMs: 20 });
  const refused = nextEvent(d, "error", (x) => x.code === "hook_unavailable", 10_000);
  const closed = nextEvent(d, "close", () => true, 10_000);
  const connected = d.connect({ timeoutMs: 30_000 });
  const err = await refused;
  assert.equal(err.status, 503);
  assert.equal(err.temporary, true);
  const close = await closed;
  assert.ok(close.reconnect, "a 503 is retried");
  assert.ok(close.reconnect.delayMs >= (close.refusal?.retryAfterMs ?? 0), "not before Retry-After");
  answer = defaultAnswer; // the backend is back
  const welcome = await connected;
  assert.deepEqual(
    (welcome.channels ?? []).map((x) => (typeof x === "string" ? x : x.channel)),
    ["user:gus"],
  );
});

test("an expiry the refresh hook extends is told with an expiry frame", async () => {
  const first = Date.now() + 4000;
  answer = (call) => {
    if (call.event === "connect") return { result: { sub: "hal", expiresAt: first } };
    if (call.event === "refresh") return { result: { expiresAt: first + 600_000 } };
    return defaultAnswer(call);
  };
  const c = cookieClient("hal");
  const welcome = await c.connect();
  assert.equal(welcome.tokenExpiresAt, first);
  const extended = await nextEvent(c, "expiry", () => true, 10_000);
  assert.equal(extended.tokenExpiresAt, first + 600_000);
  assert.equal(c.welcome?.tokenExpiresAt, first + 600_000);
  const refresh = lastCall("refresh");
  assert.equal(refresh.client.sub, "hal");
  answer = defaultAnswer;
});

test("over SSE: a client without a token sends its cookie, not Authorization, and a hook's refusal is typed", async () => {
  answer = defaultAnswer;
  const seen: Array<Record<string, string> | undefined> = [];
  const withCookie = (user: string | undefined) =>
    (async (url: string, init: { headers?: Record<string, string> }) => {
      seen.push(init.headers);
      const headers = { ...init.headers, origin: ORIGIN, ...(user ? { cookie: `sid=${user}` } : {}) };
      return fetch(url, { ...init, headers } as RequestInit);
    }) as unknown as ClientOptions["fetch"];
  const c = clients.make({ transport: "sse", fetch: withCookie("ivy") });
  const welcome = await c.connect();
  assert.equal(c.transportKind, "sse");
  assert.equal(welcome.account, "ivy");
  assert.equal(seen[0]?.["Authorization"], undefined, "no Authorization header without a token");
  assert.equal(lastCall("connect").client.transport, "sse");
  assert.equal(lastCall("connect").headers?.cookie, "sid=ivy");

  const nobody = clients.make({ transport: "sse", fetch: withCookie(undefined) });
  const e = refusal(await settle(nobody.connect()));
  assert.equal(e.code, "login_required");
  assert.equal(e.message, "log in first");
  assert.equal(e.status, 403);
  assert.equal(nobody.state, "closed");
});
