// The edge demo's client side: from distinct loopback addresses (the
// whole 127.0.0.0/8 is this machine), it
//   1. floods the edge with upgrades from one address: nginx answers 429
//      once that address is over its rate, before any broker sees it;
//   2. opens sockets from another address, under the edge's limits, until
//      the broker's own per-IP cap refuses one (429 ip_too_many_connections),
//      which shows the broker counts the real client address from
//      X-Forwarded-For and not the proxy's;
//   3. connects from a third address, which is admitted: the cap was that
//      client's, not the proxy's.
// Prints one JSON summary line and exits 0 when all three held.
//   node examples/edge/demo.mjs <edge url> <flood token> <client token> <flood count> <broker ip cap>
import { createRequire } from "node:module";

const require = createRequire(new URL("../../client-sdk-ts/package.json", import.meta.url));
const WebSocket = require("ws");

const [edge, floodToken, clientToken, floodArg = "60", capArg = "3"] = process.argv.slice(2);
const flood = Number(floodArg);
const cap = Number(capArg);
const url = `${edge.replace(/^http/, "ws")}/v1/ws`;
const open = [];

/** One handshake from `localAddress`: the socket, or the refusal. */
function attempt(localAddress, token = clientToken) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token}`], { localAddress });
    ws.once("message", (raw) => {
      open.push(ws);
      resolve({ ok: true, welcome: JSON.parse(raw.toString()) });
    });
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => {
        let parsed = null;
        try {
          parsed = JSON.parse(body);
        } catch {
          // not JSON
        }
        resolve({ ok: false, status: res.statusCode, server: res.headers.server ?? "", body: parsed });
      });
    });
    ws.once("error", (e) => resolve({ ok: false, status: 0, error: e.message }));
  });
}

const flooded = await Promise.all(Array.from({ length: flood }, () => attempt("127.0.0.2", floodToken)));
const edgeRefused = flooded.filter((r) => !r.ok && r.status === 429 && r.body?.message?.includes("(edge)")).length;
const floodAdmitted = flooded.filter((r) => r.ok).length;
for (const ws of open.splice(0)) ws.close();

const mine = [];
for (let i = 0; i <= cap; i += 1) mine.push(await attempt("127.0.0.3"));
const capped = mine.at(-1);
const brokerRefused = !capped.ok && capped.status === 429 && capped.body?.error === "ip_too_many_connections";
const other = await attempt("127.0.0.4");

const summary = {
  flood: { attempts: flood, admitted: floodAdmitted, refusedAtEdge: edgeRefused },
  perClient: {
    admitted: mine.filter((r) => r.ok).length,
    refusedByBroker: brokerRefused,
    brokerMessage: capped.body?.message ?? null,
  },
  otherClientAdmitted: other.ok,
};
console.log(JSON.stringify(summary));
for (const ws of open) ws.terminate();
const ok =
  edgeRefused > 0 &&
  floodAdmitted < flood &&
  summary.perClient.admitted === cap &&
  brokerRefused &&
  (capped.body?.message ?? "").includes("127.0.0.3") &&
  other.ok;
process.exit(ok ? 0 : 1);
