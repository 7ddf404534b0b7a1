// A tiny collaborative note on Tidegate. Keystrokes are batched every
// 150 ms into one publish of the whole text on `note:<name>`; other tabs
// replace their text with it. The SDK paces the publishes, so fast typing
// or pasting is smoothed locally instead of being dropped by the server.
import { TidegateClient } from "/sdk/tidegate.js";

const params = new URLSearchParams(location.search);
const token = params.get("token");
const url = params.get("url") ?? `ws://${location.hostname || "127.0.0.1"}:8080/v1/ws`;
const channel = `note:${params.get("note") ?? "demo"}`;
const me = Math.random().toString(36).slice(2, 8);
const BATCH_MS = 150;

const $ = (id) => document.getElementById(id);
$("channel").textContent = channel;

function log(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("log").prepend(li);
  while ($("log").children.length > 30) $("log").lastChild.remove();
}

if (!token) {
  $("setup").hidden = false;
  throw new Error("no token in the query string");
}

const client = new TidegateClient({ url, token });
window.tidegate = client; // handy in the console

// --- connection state and budget -----------------------------------------
client.on("state", ({ state }) => {
  $("state").textContent = state;
  $("state").dataset.state = state;
});
client.on("welcome", ({ limits, connId }) => {
  log(`connected as ${connId}`);
  const rows = [
    ["messages/s", limits.messagesPerSec],
    ["burst", limits.burst],
    ["account msg/s", limits.accountMessagesPerSec],
    ["max payload", `${Math.round(limits.maxPayloadBytes / 1024)} KiB`],
  ];
  $("limits").replaceChildren(
    ...rows.flatMap(([k, v]) => [
      Object.assign(document.createElement("dt"), { textContent: k }),
      Object.assign(document.createElement("dd"), { textContent: String(v) }),
    ]),
  );
  $("acct-bar").max = limits.accountBurst;
  $("acct-text").textContent = `capacity ${limits.accountBurst} · ${limits.accountMessagesPerSec}/s`;
  client.requestBudget().catch(() => undefined);
});
client.on("budget", ({ connection, account }) => {
  if (connection) {
    $("conn-bar").max = connection.capacity;
    $("conn-bar").value = connection.remaining;
    $("conn-text").textContent = `${connection.remaining}/${connection.capacity} · ${connection.refillPerSec}/s`;
  }
  if (account) {
    $("acct-bar").max = account.capacity;
    $("acct-bar").value = account.remaining;
    $("acct-text").textContent = `${account.remaining}/${account.capacity} · ${account.refillPerSec}/s`;
  }
});
setInterval(() => {
  const { connection, queued } = client.budget();
  if (!connection) return;
  $("local-bar").max = connection.capacity;
  $("local-bar").value = connection.tokens;
  $("local-text").textContent =
    `${connection.tokens.toFixed(1)}/${connection.capacity} · ${queued} queued`;
}, 250);

client.on("close", ({ code, reconnect }) =>
  log(`closed ${code}${reconnect ? `, retrying in ${(reconnect.delayMs / 1000).toFixed(1)} s` : ""}`),
);
client.on("rateLimited", ({ dropped, retryAfterMs }) =>
  log(`server dropped ${dropped}; resending after ${retryAfterMs} ms`),
);
client.on("gap", () => log("missed edits could not be recovered; showing the next one"));
client.on("error", (e) => log(`error: ${e.code}`));

// --- the note -------------------------------------------------------------
const note = $("note");
let published = 0;
let lastBudgetAsk = 0;

client
  .subscribe(channel, onEdit)
  .then(() => (document.body.dataset.subscribed = "true"))
  .catch((e) => log(`subscribe failed: ${e.code}`));

function onEdit(data, { seq }) {
  $("seq").textContent = String(seq);
  if (!data || typeof data.text !== "string" || data.from === me) return;
  const { selectionStart, selectionEnd } = note;
  note.value = data.text;
  note.setSelectionRange(selectionStart, selectionEnd);
  $("last-from").textContent = `updated by ${data.from ?? "someone"}`;
}

let timer;
let lastSent = "";
// Throttle, not debounce: while typing, one publish every BATCH_MS.
note.addEventListener("input", () => {
  if (timer === undefined) timer = setTimeout(flush, BATCH_MS);
});

async function flush() {
  timer = undefined;
  const text = note.value;
  if (text === lastSent) return;
  lastSent = text;
  try {
    const { seq } = await client.publish(channel, { text, from: me });
    published += 1;
    $("published").textContent = String(published);
    $("seq").textContent = String(seq);
    if (Date.now() - lastBudgetAsk > 2000) {
      lastBudgetAsk = Date.now();
      client.requestBudget().catch(() => undefined);
    }
  } catch (e) {
    log(`publish failed: ${e.code}`);
    lastSent = ""; // the next batch carries the text again
    clearTimeout(timer);
    timer = setTimeout(flush, 1000);
  }
}

client.connect().catch((e) => log(`not connected yet: ${e.code}`));
