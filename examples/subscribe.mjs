// Subscribe to a channel and print what arrives.
//   node examples/subscribe.mjs <token> <channel> [ws://127.0.0.1:8080/v1/ws]
// Uses the `ws` package from client-sdk-ts's dev dependencies
// (run `npm ci` in client-sdk-ts once).
import { createRequire } from "node:module";

const require = createRequire(new URL("../client-sdk-ts/package.json", import.meta.url));
const WebSocket = require("ws");

const [token, channel, url = "ws://127.0.0.1:8080/v1/ws"] = process.argv.slice(2);
if (!token || !channel) {
  console.error("usage: node examples/subscribe.mjs <token> <channel> [url]");
  process.exit(2);
}
const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token}`]);
ws.on("open", () => ws.send(JSON.stringify({ type: "subscribe", channel, id: 1 })));
ws.on("message", (raw) => console.log(raw.toString()));
ws.on("close", (code, reason) => {
  console.log(`closed ${code} ${reason}`);
  process.exit(code === 1000 ? 0 : 1);
});
ws.on("unexpected-response", (_req, res) => {
  console.error(`refused: HTTP ${res.statusCode}`);
  process.exit(1);
});
