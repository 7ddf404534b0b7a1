// A tiny collaborative note on Tidegate. Keystrokes are batched every
// 150 ms into one publish of the whole text on `note:<name>`; other tabs
// replace their text with it. The SDK paces the publishes, so fast typing
// or pasting is smoothed locally instead of being dropped by the server.
// Each tab's caret goes to `cursor:<name>`, a conflating namespace keyed by
// `/user` (config.toml): a tab that falls behind gets every user's latest
// caret, never a backlog of old ones. `note:` is a presence namespace
// (PROTOCOL §13): the page lists who is in the note, by the `info.name` of
// their token, kept live from the SDK's join/leave events.
import { TidegateClient } from "/sdk/tidegate.js";

const params = new URLSearchParams(location.search);
const token = params.get("token");
const url = params.get("url") ?? `ws://${location.hostname || "127.0.0.1"}:8080/v1/ws`;
const channel = `note:${params.get("note") ?? "demo"}`;
const cursorChannel = `cursor:${params.get("note") ?? "demo"}`;
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
  .subscribe(channel, onEdit, { presence: true })
  .then(() => (document.body.dataset.subscribed = "true"))
  .catch((e) => log(`subscribe failed: ${e.code}`));

// --- who is in the note (presence) -----------------------------------------
const myConn = () => client.welcome?.connId;
function renderMembers() {
  const members = [...(client.subscription(channel)?.members.values() ?? [])];
  const byUser = new Map();
  for (const m of members) {
    const name = typeof m.info?.name === "string" ? m.info.name : m.user;
    const entry = byUser.get(m.user) ?? { name, tabs: 0, me: false };
    entry.tabs += 1;
    entry.me ||= m.connId === myConn();
    byUser.set(m.user, entry);
  }
  const items = [...byUser.values()]
    .sort((a, b) => a.name.localeCompare(b.name))
    .map(({ name, tabs, me: mine }) => {
      const li = document.createElement("li");
      li.className = "member";
      li.dataset.name = name;
      const avatar = document.createElement("span");
      avatar.className = "avatar";
      avatar.textContent = name.slice(0, 1).toUpperCase();
      avatar.style.setProperty("--hue", String([...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 360, 7)));
      const label = document.createElement("span");
      label.textContent = `${name}${mine ? " (you)" : ""}${tabs > 1 ? ` ×${tabs}` : ""}`;
      li.append(avatar, label);
      return li;
    });
  $("members").replaceChildren(...items);
  document.body.dataset.members = String(byUser.size);
}
client.on("join", ({ channel: c, member }) => {
  if (c !== channel) return;
  renderMembers();
  if (member.connId !== myConn()) log(`${member.info?.name ?? member.user} joined`);
});
client.on("leave", ({ channel: c, member }) => {
  if (c !== channel) return;
  renderMembers();
  log(`${member.info?.name ?? member.user} left`);
});

function onEdit(data, { seq }) {
  $("seq").textContent = String(seq);
  if (!data || typeof data.text !== "string" || data.from === me) return;
  const { selectionStart, selectionEnd } = note;
  note.value = data.text;
  note.setSelectionRange(selectionStart, selectionEnd);
  renderCursors();
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

// --- remote cursors (a conflating channel) ---------------------------------
const cursors = new Map(); // user -> caret position
let cursorTimer;
let cursorSent = -1;

// Cursors only when the token may use their channel: a token minted for
// the note alone shows the note without an error it did not provoke.
if (tokenAllows(cursorChannel)) {
  client
    .subscribe(cursorChannel, onCursor)
    .then(() => (document.body.dataset.cursors = "true"))
    .catch((e) => log(`cursor subscribe failed: ${e.code}`));
} else {
  $("cursor-view").textContent = `cursors are off: this token may not use ${cursorChannel}`;
}

/** Whether the token's sub_channels and pub_channels globs cover `name`. */
function tokenAllows(name) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
    const matches = (globs) =>
      (globs ?? []).some((g) =>
        new RegExp(`^${g.split("*").map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`).test(name),
      );
    return matches(claims.sub_channels) && matches(claims.pub_channels);
  } catch {
    return true; // not a JWT we can read: let the broker decide
  }
}

function onCursor(data) {
  if (!data || typeof data.user !== "string" || data.user === me) return;
  if (typeof data.pos !== "number") return;
  cursors.set(data.user, data.pos);
  renderCursors();
}

/** The note as text with a marker at each remote caret. */
function renderCursors() {
  const text = note.value;
  const marks = [...cursors].sort((a, b) => a[1] - b[1]);
  const parts = [];
  let at = 0;
  for (const [user, pos] of marks) {
    const p = Math.min(Math.max(pos, 0), text.length);
    parts.push(document.createTextNode(text.slice(at, p)));
    const caret = document.createElement("span");
    caret.className = "caret";
    caret.dataset.user = user;
    caret.dataset.pos = String(pos);
    caret.title = user;
    caret.style.setProperty("--hue", String(hue(user)));
    parts.push(caret);
    at = p;
  }
  parts.push(document.createTextNode(text.slice(at)));
  $("cursor-view").replaceChildren(...parts);
  $("cursor-count").textContent = String(cursors.size);
}

function hue(user) {
  let h = 0;
  for (const c of user) h = (h * 31 + c.charCodeAt(0)) % 360;
  return h;
}

// One caret publish per BATCH_MS at most, the latest position only.
for (const ev of ["keyup", "click", "select", "input"]) {
  note.addEventListener(ev, () => {
    if (cursorTimer === undefined) cursorTimer = setTimeout(sendCursor, BATCH_MS);
  });
}

function sendCursor() {
  cursorTimer = undefined;
  const pos = note.selectionStart;
  if (pos === cursorSent) return;
  cursorSent = pos;
  client.publish(cursorChannel, { user: me, pos }).catch(() => (cursorSent = -1));
}

note.addEventListener("input", renderCursors);
window.tidegateUser = me;

client.connect().catch((e) => log(`not connected yet: ${e.code}`));
