#!/usr/bin/env node
// A backend that answers Tidegate's hooks (PROTOCOL.md §15, docs/hooks.md)
// from its own cookie sessions, with node:http only:
//
//   POST /login {"name"}   sets the `sid` cookie (a session: sid → name)
//   POST /tidegate/hook    the broker's calls, Standard Webhooks-signed:
//     connect    the session from the passed `cookie` header → who, and
//                the server-side channel `user:<name>`
//     subscribe  `room:vip` only for ann; other rooms for anyone
//     publish    rewritten: the text trimmed to 200 characters, with who
//                said it; an empty one refused
//     refresh    another 10 minutes while the session lasts
//     rpc        `whoami` and `roll`
//   GET /, /sdk/tidegate.js   the demo page and the SDK bundle
//
//   APP_HOOK_SECRET=whsec_… node examples/hooks/backend.mjs [--port 9000]
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { Webhook } from "standardwebhooks";

/** The secret of hooks.toml (a sample: set your own with APP_HOOK_SECRET). */
export const SAMPLE_SECRET = "whsec_dGlkZWdhdGUtZXhhbXBsZS1ob29rLXNlY3JldC0zMmI=";
const SESSION_MS = 10 * 60_000;
const MAX_SESSIONS = 10_000; // the oldest is forgotten past it

const FILES = {
  "/": ["text/html", new URL("index.html", import.meta.url)],
  "/sdk/tidegate.js": ["text/javascript", new URL("../../client-sdk-ts/dist/tidegate.js", import.meta.url)],
};

/** What each event answers: `{result}`, `{error}` or `{disconnect}`. */
function decide(call, sessions) {
  const who = call.client?.sub;
  switch (call.event) {
    case "connect": {
      const sid = /(?:^|;\s*)sid=([\w-]+)/.exec(call.headers?.cookie ?? "")?.[1];
      const name = sid && sessions.get(sid);
      if (!name) return { error: { code: "login_required", message: "log in first (POST /login)" } };
      return {
        result: { sub: name, info: { name }, expiresAt: Date.now() + SESSION_MS, channels: [`user:${name}`] },
      };
    }
    case "subscribe":
      if (call.channel === "room:vip" && who !== "ann") {
        return { error: { code: "not_invited", message: "room:vip is for ann" } };
      }
      return { result: {} };
    case "publish": {
      const text = String(call.data?.text ?? "").trim().slice(0, 200);
      if (!text) return { error: { code: "empty_message", message: "say something" } };
      return { result: { data: { text, from: who } } };
    }
    case "refresh":
      return [...sessions.values()].includes(who)
        ? { result: { expiresAt: Date.now() + SESSION_MS } }
        : { error: { code: "logged_out", message: "the session ended" } };
    case "rpc":
      if (call.method === "whoami") return { result: { data: { name: who, transport: call.client.transport } } };
      if (call.method === "roll") return { result: { data: { n: 1 + Math.floor(Math.random() * 6) } } };
      return { error: { code: "no_such_method", message: `no method ${call.method}` } };
    default:
      return { error: { code: "unknown_event", message: String(call.event) } };
  }
}

/** Starts the backend; resolves with its URL, the calls it verified, and stop(). */
export function startBackend({ port = 9000, host = "127.0.0.1", secret = SAMPLE_SECRET } = {}) {
  const webhook = new Webhook(secret);
  const sessions = new Map(); // sid → name
  const calls = []; // the last 1,000 verified calls, for a test or a look
  const server = createServer(async (req, res) => {
    const body = await new Promise((ok) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c)).on("end", () => ok(Buffer.concat(chunks).toString("utf8")));
    });
    const send = (status, value, headers = {}) =>
      res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(value));
    if (req.method === "POST" && req.url === "/login") {
      let name = "";
      try {
        name = String(JSON.parse(body).name ?? "").replace(/[^a-z0-9]/gi, "").slice(0, 32);
      } catch {} // not JSON: no name
      if (!name) return send(400, { error: "a name of letters and digits" });
      const sid = randomBytes(16).toString("hex");
      sessions.set(sid, name);
      if (sessions.size > MAX_SESSIONS) sessions.delete(sessions.keys().next().value);
      return send(200, { name }, { "set-cookie": `sid=${sid}; Path=/; HttpOnly; SameSite=Lax` });
    }
    if (req.method === "POST" && req.url === "/tidegate/hook") {
      let call;
      try {
        call = webhook.verify(body, req.headers); // the signature, the id, the timestamp's age
      } catch {
        return send(401, { error: "bad signature" }); // not an answer: the hook's on_error decides
      }
      if (calls.push(call) > 1000) calls.shift();
      return send(200, decide(call, sessions));
    }
    const file = req.method === "GET" && FILES[new URL(req.url, "http://x").pathname];
    const content = file && (await readFile(file[1]).catch(() => undefined));
    if (!content) return send(404, { error: "not found" });
    res.writeHead(200, { "content-type": file[0] }).end(content);
  });
  return new Promise((ok) =>
    server.listen(port, host, () => {
      const url = `http://${host}:${server.address().port}`;
      ok({ url, calls, stop: () => new Promise((done) => server.close(() => done())) });
    }),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf("--port");
  const port = at > 0 ? Number(process.argv[at + 1]) : 9000;
  const { url } = await startBackend({ port, secret: process.env.APP_HOOK_SECRET ?? SAMPLE_SECRET });
  console.log(`example backend on ${url} (hooks at ${url}/tidegate/hook)`);
}
