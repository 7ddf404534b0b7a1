#!/usr/bin/env node
// The backend of the chat: what a Laravel app does for Echo, in one file of
// Node with node:http and the `pusher` server library, pointed at Tidegate
// instead of pusher.com (only the host changes):
//
//   GET  /                        the chat page (index.html)
//   GET  /echo.json               what the page gives Echo: key, wsHost, wsPort
//   GET  /vendor/pusher.js, /vendor/echo.js   pusher-js and laravel-echo, from
//                                 the packages examples/ installs
//   POST /login {"name"}          a cookie session (the page)
//   POST /tokens {"name"}         a bearer token (a client without cookies:
//                                 demo.mjs, a mobile app; Echo's `bearerToken`)
//   POST /broadcasting/auth       Laravel's channel authorization route:
//                                 `presence-chat` (with who you are) and
//                                 `private-chat`, signed by authorizeChannel
//   POST /broadcasting/user-auth  Laravel's user authentication route, signed
//                                 by authenticateUser (for `pusher.signin()`)
//   POST /messages {"text", "channel"?}   sends the message with trigger(), as
//                                 Laravel's broadcast(new MessageSent(...)) does
//
//   node examples/pusher/server.mjs [--port 9100] [--broker http://127.0.0.1:8080]
//
// The app defaults to the sample app of the shipped config.toml (1234 /
// app-key / its sample secret, accepted on a loopback broker only); set
// PUSHER_APP_ID, PUSHER_APP_KEY and PUSHER_APP_SECRET for yours.
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import Pusher from "pusher";

/** config.toml's sample app (`[[pusher.apps]]`). */
export const SAMPLE_APP = { appId: "1234", key: "app-key", secret: "tidegate-sample-pusher-secret" };
/** The channels this chat authorizes, by kind: Echo's join("chat") and private("chat"). */
export const CHANNELS = ["presence-chat", "private-chat"];
/** Laravel's name for the event class `App\Events\MessageSent` (Echo's default namespace). */
export const MESSAGE_EVENT = "App\\Events\\MessageSent";
const MAX_SESSIONS = 10_000; // cookies and bearer tokens together; the oldest is forgotten past it
const MAX_BODY = 16 * 1024; // every request here is a few hundred bytes
const MAX_TEXT = 500; // characters of one message

const require = createRequire(import.meta.url);
const FILES = {
  "/": ["text/html", fileURLToPath(new URL("index.html", import.meta.url))],
  "/vendor/pusher.js": ["text/javascript", require.resolve("pusher-js/dist/web/pusher.js")],
  "/vendor/echo.js": ["text/javascript", require.resolve("laravel-echo").replace(/echo\.common\.js$/, "echo.js")],
};

/** A name of letters and digits, 1-32 of them, or "". */
const cleanName = (v) =>
  String(v ?? "")
    .replace(/[^a-z0-9]/gi, "")
    .slice(0, 32);

/**
 * Starts the backend; resolves with its URL and stop(). `broker` is the
 * broker's HTTP address: the `pusher` library triggers there, and the page
 * connects to its host and port.
 */
export function startServer({ port = 9100, host = "127.0.0.1", broker = "http://127.0.0.1:8080", app = SAMPLE_APP } = {}) {
  const at = new URL(broker);
  const useTLS = at.protocol === "https:";
  const brokerPort = at.port || (useTLS ? "443" : "80");
  const pusher = new Pusher({ ...app, host: at.hostname, port: brokerPort, useTLS });
  const echo = { key: app.key, wsHost: at.hostname, wsPort: Number(brokerPort), forceTLS: useTLS };
  const sessions = new Map(); // sid or token → name; bounded by MAX_SESSIONS

  const newSession = (name) => {
    const id = randomBytes(16).toString("hex");
    sessions.set(id, name);
    if (sessions.size > MAX_SESSIONS) sessions.delete(sessions.keys().next().value);
    return id;
  };
  /** Who is asking: the `sid` cookie (SameSite=Lax: no cross-site POST carries it) or a bearer token. */
  const who = (req) => {
    const sid = /(?:^|;\s*)sid=([0-9a-f]{32})/.exec(req.headers.cookie ?? "")?.[1];
    const token = /^Bearer ([0-9a-f]{32})$/.exec(req.headers.authorization ?? "")?.[1];
    return sessions.get(sid) ?? sessions.get(token);
  };

  const server = createServer(async (req, res) => {
    const send = (status, value, headers = {}) =>
      res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(value));
    const path = new URL(req.url, "http://x").pathname;
    if (req.method === "GET") {
      if (path === "/echo.json") return send(200, echo);
      const file = FILES[path];
      const content = file && (await readFile(file[1]).catch(() => undefined));
      if (!content) return send(404, { error: "not found" });
      return res.writeHead(200, { "content-type": file[0] }).end(content);
    }
    if (req.method !== "POST") return send(405, { error: "GET or POST" });
    let body = "";
    for await (const chunk of req) {
      body += chunk;
      if (body.length > MAX_BODY) return send(413, { error: `a body of at most ${MAX_BODY} bytes` });
    }
    // pusher-js posts its authorization requests as a form; the page and demo.mjs post JSON.
    const form = req.headers["content-type"]?.startsWith("application/x-www-form-urlencoded");
    let fields = {};
    try {
      fields = form ? Object.fromEntries(new URLSearchParams(body)) : JSON.parse(body || "{}");
    } catch {
      return send(400, { error: "a JSON body" });
    }

    if (path === "/login" || path === "/tokens") {
      const name = cleanName(fields.name);
      if (!name) return send(400, { error: "a name of 1-32 letters and digits" });
      const id = newSession(name);
      if (path === "/tokens") return send(200, { name, token: id });
      return send(200, { name }, { "set-cookie": `sid=${id}; Path=/; HttpOnly; SameSite=Lax` });
    }
    const name = who(req);
    if (!name) return send(403, { error: "log in first (POST /login, or POST /tokens for a bearer token)" });
    const socketId = String(fields.socket_id ?? "");

    if (path === "/broadcasting/auth") {
      const channel = String(fields.channel_name ?? "");
      if (!CHANNELS.includes(channel)) return send(403, { error: `this chat authorizes ${CHANNELS.join(" and ")}` });
      // The member pusher-js's here/joining/leaving report: user_info is what
      // the other tabs see; user_id makes two tabs of one user one member.
      const member = channel.startsWith("presence-") ? { user_id: name, user_info: { name } } : undefined;
      try {
        return send(200, pusher.authorizeChannel(socketId, channel, member));
      } catch (e) {
        return send(400, { error: e.message }); // a malformed socket_id
      }
    }
    if (path === "/broadcasting/user-auth") {
      try {
        return send(200, pusher.authenticateUser(socketId, { id: name, user_info: { name } }));
      } catch (e) {
        return send(400, { error: e.message });
      }
    }
    if (path === "/messages") {
      const text = String(fields.text ?? "").trim().slice(0, MAX_TEXT);
      if (!text) return send(400, { error: "say something" });
      const channel = fields.channel ?? CHANNELS[0];
      if (!CHANNELS.includes(channel)) return send(400, { error: `a channel of ${CHANNELS.join(", ")}` });
      try {
        await pusher.trigger(channel, MESSAGE_EVENT, { user: { id: name, name }, text, at: Date.now() });
      } catch (e) {
        // The broker refused (429 when the app's budget is spent, 413 too big): say so, with its status.
        const why = e.status ? `the broker answered ${e.status}` : `the broker is not reachable (${e.message})`;
        return send(502, { error: why, status: e.status ?? null });
      }
      return send(202, { sent: true });
    }
    return send(404, { error: "not found" });
  });
  return new Promise((ok) =>
    server.listen(port, host, () => {
      const url = `http://${host}:${server.address().port}`;
      ok({ url, stop: () => new Promise((done) => server.close(() => done())) });
    }),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (flag, fallback) => {
    const i = process.argv.indexOf(flag);
    return i > 0 ? process.argv[i + 1] : fallback;
  };
  const app = {
    appId: process.env.PUSHER_APP_ID ?? SAMPLE_APP.appId,
    key: process.env.PUSHER_APP_KEY ?? SAMPLE_APP.key,
    secret: process.env.PUSHER_APP_SECRET ?? SAMPLE_APP.secret,
  };
  const { url } = await startServer({ port: Number(arg("--port", 9100)), broker: arg("--broker", undefined), app });
  console.log(`chat on ${url} (open it in two windows)`);
}
