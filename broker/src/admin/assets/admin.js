// The operator's page: reads /v1/admin/overview with the key entered once
// per tab (sessionStorage only), every 2 s while the tab is visible, and
// runs the actions with a confirmation before and a report after.
"use strict";

const KEY = "tidegate.adminKey";
const POLL_MS = 2000;
const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#5d4037", "#827717", "#37474f"];
let timer = null;
let role = "viewer";

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

const fmt = (n) => (n >= 100 ? Math.round(n).toLocaleString() : (Math.round(n * 10) / 10).toLocaleString());
const duration = (ms) => {
  const s = Math.ceil(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
};

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(data.message || `HTTP ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return data;
}

function fill(tbody, rows, empty) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colSpan: 8, class: "muted" }, empty))]));
}

function renderNodes(o) {
  $("total-connections").textContent = fmt(o.totals.connections);
  $("total-in").textContent = fmt(o.totals.messagesInPerSec);
  $("total-out").textContent = fmt(o.totals.messagesOutPerSec);
  fill($("nodes").tBodies[0], o.nodes.map((n) =>
    el("tr", { "data-node": n.id },
      el("td", {}, n.id),
      el("td", { class: "num" }, fmt(n.connections)),
      el("td", { class: "num" }, fmt(n.messagesInPerSec)),
      el("td", { class: "num" }, fmt(n.messagesOutPerSec)),
      el("td", {}, n.bridgeUp ? "up" : "down"),
      el("td", {}, n.draining ? "draining" : "serving"))), "no nodes");
}

function renderAccounts(o) {
  fill($("accounts").tBodies[0], o.accounts.map((a) => {
    const budget = a.budgetCapacity == null ? "—" : `${fmt(a.budgetRemaining)} / ${fmt(a.budgetCapacity)}`;
    const ban = el("button", { type: "button" }, "Ban…");
    ban.addEventListener("click", () => { $("ban-kind").value = "account"; $("ban-value").value = a.account; $("ban-value").focus(); });
    ban.hidden = role !== "admin";
    return el("tr", { "data-account": a.account },
      el("td", {}, a.account),
      el("td", { class: "num" }, `${a.connections} / ${a.maxConnections}`),
      el("td", { class: "num" }, budget),
      el("td", {}, ...pressureBar(a.pressure)),
      el("td", {}, ban));
  }), "no accounts connected");
}

function renderChart(o) {
  const bucket = o.bucketMs;
  const end = Math.floor(o.generatedAt / bucket) * bucket;
  const count = 60;
  const start = end - (count - 1) * bucket;
  $("chart-span").textContent = `(last ${Math.round((count * bucket) / 60000)} min, ${bucket / 1000} s buckets)`;
  const series = [...new Set(o.rejections.map((r) => `${r.layer}/${r.reason}`))].sort();
  const color = (s) => COLORS[series.indexOf(s) % COLORS.length];
  const stacks = new Map();
  for (const r of o.rejections) {
    if (r.at < start) continue;
    const i = Math.round((r.at - start) / bucket);
    if (!stacks.has(i)) stacks.set(i, []);
    stacks.get(i).push(r);
  }
  const max = Math.max(1, ...[...stacks.values()].map((rs) => rs.reduce((s, r) => s + r.count, 0)));
  const W = 600, H = 160, pad = 20, bw = (W - pad) / count;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H + 20}`, role: "img", "aria-label": "rejections over time" });
  root.append(svg("line", { x1: pad, y1: H, x2: W, y2: H, stroke: "#98a2b3" }));
  const top = svg("text", { x: 0, y: 12, "font-size": 10, fill: "#667085" });
  top.textContent = fmt(max);
  root.append(top);
  for (const [i, rs] of stacks) {
    let y = H;
    for (const r of rs.sort((a, b) => `${a.layer}/${a.reason}`.localeCompare(`${b.layer}/${b.reason}`))) {
      const h = (r.count / max) * (H - 14);
      y -= h;
      const rect = svg("rect", { x: pad + i * bw + 1, y, width: Math.max(1, bw - 2), height: h, fill: color(`${r.layer}/${r.reason}`) });
      const title = svg("title");
      title.textContent = `${r.layer}/${r.reason}: ${r.count} at ${new Date(r.at).toLocaleTimeString()}`;
      rect.append(title);
      root.append(rect);
    }
  }
  const label = svg("text", { x: W, y: H + 14, "text-anchor": "end", "font-size": 10, fill: "#667085" });
  label.textContent = "now";
  root.append(label);
  $("chart").replaceChildren(root);
  const totals = new Map();
  for (const r of o.rejections) totals.set(`${r.layer}/${r.reason}`, (totals.get(`${r.layer}/${r.reason}`) || 0) + r.count);
  $("legend").replaceChildren(...(series.length
    ? series.map((s) => { const i = el("i"); i.style.background = color(s); return el("li", { "data-series": s }, i, `${s} `, el("span", { class: "muted" }, fmt(totals.get(s)))); })
    : [el("li", { class: "muted" }, "no rejections in this window")]));
}

function pressureBar(pressure) {
  const pct = Math.round(pressure * 100);
  const bar = el("span", { class: pct >= 90 ? "bar hot" : "bar" }, el("span"));
  bar.firstChild.style.width = `${pct}%`;
  return [bar, ` ${pct}%`];
}

// Each Pusher app (§16): its figures summed over the nodes, its refusals
// by layer/reason, its webhook endpoints' health and its account's use.
function renderPusherApps(o) {
  const apps = o.pusherApps || [];
  $("pusher-apps-section").hidden = apps.length === 0;
  fill($("pusher-apps").tBodies[0], apps.map((a) => {
    const refused = a.refusals.length
      ? a.refusals.map((r) => `${r.layer}/${r.reason} ${fmt(r.count)}`).join(", ")
      : "none";
    const hooks = a.webhooks.length
      ? a.webhooks.map((w) => `${w.id} ${w.healthy ? "healthy" : "unhealthy"} (${fmt(w.queued)} queued)`).join(", ")
      : "—";
    const unhealthy = a.webhooks.some((w) => !w.healthy);
    const l = a.limits;
    // Disconnecting an app is disconnecting its account (every node, 4100
    // on this wire): the button fills the form, which confirms first.
    const off = el("button", { type: "button" }, "Disconnect…");
    off.addEventListener("click", () => { $("disconnect-kind").value = "account"; $("disconnect-value").value = a.account; $("disconnect-value").focus(); });
    off.hidden = role !== "admin";
    return el("tr", { "data-app": a.id },
      el("td", {}, a.id),
      el("td", {}, el("code", {}, a.key)),
      el("td", {}, a.account),
      el("td", { class: "num" }, fmt(a.connections)),
      el("td", { class: "num" }, fmt(a.channels)),
      el("td", { class: "num" }, fmt(a.presenceUsers)),
      el("td", { class: "num" }, fmt(a.clientEvents)),
      el("td", { class: "num" }, fmt(a.apiEvents)),
      el("td", { class: a.refusals.length ? "" : "muted" }, refused),
      el("td", { class: unhealthy ? "error" : "" }, hooks),
      el("td", { title: `account ${l.account}: ${l.connections} / ${l.maxConnections} connections` }, ...pressureBar(l.pressure)),
      el("td", {}, off));
  }), "no Pusher apps configured");
}

function renderWebhooks(o) {
  const hooks = o.webhooks || [];
  fill($("webhooks").tBodies[0], hooks.map((w) =>
    el("tr", {}, el("td", {}, w.id), el("td", { class: w.healthy ? "" : "error" }, w.healthy ? "healthy" : "unhealthy"), el("td", { class: "num" }, fmt(w.queued)))),
    "no webhook endpoints configured");
}

function renderBans(o) {
  fill($("bans").tBodies[0], o.bans.map((b) => {
    const what = b.account !== undefined ? { account: b.account } : { ip: b.ip };
    const label = b.account !== undefined ? `account ${b.account}` : `IP ${b.ip}`;
    const lift = el("button", { type: "button" }, "Unban");
    lift.hidden = role !== "admin";
    lift.addEventListener("click", () => act(`Lift the ban on ${label}?`, "DELETE", "/v1/admin/ban", what,
      (r) => (r.lifted ? `Ban on ${label} lifted on every node.` : `${label} was not banned.`)));
    return el("tr", { "data-ban": b.account ?? b.ip },
      el("td", {}, label), el("td", {}, new Date(b.expiresAt).toLocaleString()), el("td", { class: "num" }, duration(b.remainingMs)), el("td", {}, lift));
  }), "nobody is banned");
}

function render(o) {
  role = o.role;
  $("scope").textContent = `${o.role} · answered by ${o.node}${o.clusterWide ? "" : " · this node only (cluster unreachable)"}`;
  $("updated").textContent = `updated ${new Date(o.generatedAt).toLocaleTimeString()}`;
  $("actions").hidden = role !== "admin";
  renderNodes(o);
  renderAccounts(o);
  renderChart(o);
  renderPusherApps(o);
  renderWebhooks(o);
  renderBans(o);
}

async function refresh() {
  try {
    render(await api("GET", "/v1/admin/overview"));
    return true;
  } catch (e) {
    if (e.status === 401 || e.status === 404) {
      logout(e.status === 401 ? "That key was not accepted." : "The admin routes are not enabled on this node.");
      return false;
    }
    $("status").textContent = `Could not refresh: ${e.message}`;
    return true;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = null;
  if (document.hidden || !sessionStorage.getItem(KEY)) return;
  timer = setTimeout(async () => { if (await refresh()) schedule(); }, POLL_MS);
}

async function act(question, method, path, body, describe) {
  if (!window.confirm(question)) return;
  try {
    const r = await api(method, path, body);
    $("status").textContent = describe(r);
  } catch (e) {
    $("status").textContent = `Failed: ${e.message}`;
  }
  await refresh();
}

async function login(key) {
  sessionStorage.setItem(KEY, key);
  $("login").hidden = true;
  $("console").hidden = false;
  $("forget").hidden = false;
  if (await refresh()) schedule();
}

function logout(message) {
  sessionStorage.removeItem(KEY);
  clearTimeout(timer);
  $("console").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => { ev.preventDefault(); login($("key").value.trim()); $("key").value = ""; });
  $("forget").addEventListener("click", () => logout());
  $("disconnect-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const kind = $("disconnect-kind").value, value = $("disconnect-value").value.trim();
    act(`Disconnect ${kind} ${value} on every node?`, "POST", "/v1/admin/disconnect", { [kind]: value },
      (r) => `Disconnected ${kind} ${value}: ${r.closed} socket(s) closed on this node; the other nodes close theirs.`);
  });
  $("ban-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const kind = $("ban-kind").value, value = $("ban-value").value.trim(), minutes = Number($("ban-minutes").value);
    act(`Ban ${kind} ${value} for ${minutes} min on every node? Its sockets close now.`, "POST", "/v1/admin/ban",
      { [kind]: value, ttlMs: minutes * 60000 },
      (r) => `Banned ${kind} ${value} until ${new Date(r.expiresAt).toLocaleTimeString()}: ${r.closed} socket(s) closed on this node; the other nodes close theirs.`);
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh().then((ok) => ok && schedule()); else schedule(); });
  const key = sessionStorage.getItem(KEY);
  if (key) login(key);
});
