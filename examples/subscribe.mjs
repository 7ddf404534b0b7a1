// Subscribe to a channel and print what arrives.
//   node examples/subscribe.mjs <token> <channel> [ws://127.0.0.1:8080/v1/ws]
// Needs nothing installed: it uses Node's built-in WebSocket (Node 22+, and
// Node 20 behind --experimental-websocket, which this script turns on for
// itself by re-running under that flag).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

if (typeof globalThis.WebSocket !== "function") {
  const again = spawnSync(
    process.execPath,
    ["--experimental-websocket", "--no-warnings", fileURLToPath(import.meta.url), ...process.argv.slice(2)],
    { stdio: "inherit" },
  );
  process.exit(again.status ?? 1);
}

const [token, channel, url = "ws://127.0.0.1:8080/v1/ws"] = process.argv.slice(2);
if (!token || !channel) {
  console.error("usage: node examples/subscribe.mjs <token> <channel> [url]");
  process.exit(2);
}
const ws = new WebSocket(url, ["tidegate.v1", `bearer.${token}`]);
ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "subscribe", channel, id: 1 })));
ws.addEventListener("message", (e) => console.log(String(e.data)));
let opened = false;
ws.addEventListener("open", () => (opened = true));
// A refused handshake (a bad token, or no broker at the URL) is an error
// before "open"; the built-in WebSocket does not expose the HTTP status.
ws.addEventListener("error", () => {
  if (!opened) {
    console.error(`refused: the handshake with ${url} failed (check the token and that the broker runs)`);
    process.exit(1);
  }
});
ws.addEventListener("close", (e) => {
  console.log(`closed ${e.code} ${e.reason}`);
  process.exit(e.code === 1000 ? 0 : 1);
});
