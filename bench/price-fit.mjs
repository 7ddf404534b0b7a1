#!/usr/bin/env node
// Fits the publish cost function (broker/src/pricing.rs) to measured CPU:
//
//   cpu_us ≈ a + b × ⌈bytes / 1024⌉ + c × ⌊subscribers / 1000⌋
//
// the same two numbers the broker prices by, so the fit says what the
// cost function can predict and nothing it cannot. Reads `fanout` results
// of tidegate-load (one or more JSON files, e.g. from bench/price-measure.sh;
// cells of the same subscribers × payload are pooled over files), takes each
// cell's mean CPU µs per publish, fits by least squares, and prints the
// prices for a plan whose `publish` is 1 unit: `publish_per_kib` = b / a,
// `publish_per_1k_subscribers` = c / a, then every cell measured against
// what the fit and the rounded prices predict.
//
//   node bench/price-fit.mjs [--model M] [--weight W] [--field NAME] FILE.json...
//
// --model priced (default): the broker's function, above.
//         pro-rata: c × subscribers/1000 (not floored), to see what the
//         floor costs in accuracy.
//         delivery: a + c × subscribers/1000 + d × subscribers/1000 × KiB,
//         a cost per delivery that grows with size (not what the broker
//         computes: for comparison).
// --weight relative (default): minimise relative error (each cell weighted
//         1 / measured², so a 10-subscriber channel counts as much as a
//         3,000 one); ols: plain least squares (absolute error, dominated
//         by the biggest cells).
// --field: the per-publish figure of a cell (default
//         broker_cpu_us_per_publish_net: idle CPU subtracted).
// Node 20, no dependencies.
import { readFileSync } from "node:fs";

const MODELS = {
  priced: {
    names: ["a", "b (per ⌈KiB⌉)", "c (per ⌊subs/1000⌋)"],
    x: (r) => [1, Math.ceil(r.bytes / 1024), Math.floor(r.subs / 1000)],
  },
  "pro-rata": {
    names: ["a", "b (per ⌈KiB⌉)", "c (per subs/1000)"],
    x: (r) => [1, Math.ceil(r.bytes / 1024), r.subs / 1000],
  },
  delivery: {
    names: ["a", "c (per subs/1000)", "d (per subs/1000 × KiB)"],
    x: (r) => [1, r.subs / 1000, (r.subs / 1000) * (r.bytes / 1024)],
  },
};

const args = process.argv.slice(2);
let field = "broker_cpu_us_per_publish_net";
let weight = "relative";
let modelName = "priced";
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--field") field = args[++i];
  else if (args[i] === "--weight") weight = args[++i];
  else if (args[i] === "--model") modelName = args[++i];
  else files.push(args[i]);
}
const model = MODELS[modelName];
if (files.length === 0 || !model || !["ols", "relative"].includes(weight)) {
  console.error(
    "usage: node bench/price-fit.mjs [--model priced|pro-rata|delivery] [--weight relative|ols] [--field NAME] FILE.json...",
  );
  process.exit(2);
}

// subscribers × payload → measured values, over every file.
const cells = new Map();
for (const f of files) {
  const doc = JSON.parse(readFileSync(f, "utf8"));
  if (doc.scenario !== "fanout") throw new Error(`${f}: not a fanout result`);
  for (const c of doc.results.cells) {
    if (c.broker !== "tidegate") continue;
    if (typeof c[field] !== "number") throw new Error(`${f}: no ${field} in a cell`);
    const key = `${c.subscribers}|${c.payload_bytes}`;
    if (!cells.has(key)) {
      cells.set(key, { subs: c.subscribers, bytes: c.payload_bytes, runs: [], rates: [], bg: [] });
    }
    const cell = cells.get(key);
    cell.runs.push(c[field]);
    cell.rates.push(c.publish_rate);
    cell.bg.push(c.background_cpu_cores);
  }
}
const rows = [...cells.values()].sort((x, y) => x.subs - y.subs || x.bytes - y.bytes);
const mean = (v) => v.reduce((s, x) => s + x, 0) / v.length;
for (const r of rows) {
  r.y = mean(r.runs);
  r.spread = r.y > 0 ? (Math.max(...r.runs) - Math.min(...r.runs)) / r.y : 0;
}

// Weighted least squares: the normal equations, solved by Gauss-Jordan.
function fit(points) {
  const n = model.x(points[0]).length;
  const m = Array.from({ length: n }, () => new Array(n + 1).fill(0));
  for (const p of points) {
    const x = model.x(p);
    const w = weight === "relative" ? 1 / (p.y * p.y) : 1;
    for (let i = 0; i < n; i++) {
      m[i][n] += w * x[i] * p.y;
      for (let j = 0; j < n; j++) m[i][j] += w * x[i] * x[j];
    }
  }
  for (let col = 0; col < n; col++) {
    let pivot = col;
    for (let r = col + 1; r < n; r++) if (Math.abs(m[r][col]) > Math.abs(m[pivot][col])) pivot = r;
    if (Math.abs(m[pivot][col]) < 1e-12) throw new Error("singular: measure more sizes and fan-outs");
    [m[col], m[pivot]] = [m[pivot], m[col]];
    for (let r = 0; r < n; r++) {
      if (r === col) continue;
      const f = m[r][col] / m[col][col];
      for (let k = col; k <= n; k++) m[r][k] -= f * m[col][k];
    }
  }
  return m.map((row, i) => row[n] / row[i]);
}

const fmt = (x, d = 1) => x.toFixed(d);
let coef;
try {
  coef = fit(rows);
} catch (e) {
  // Too few sizes or fan-outs to fit (e.g. only channels under 1,000):
  // the measured cells alone.
  console.log(`cells: ${rows.length} (${files.length} file(s)), field ${field}: ${e.message}`);
  console.log("| subscribers | payload | publishes/s | runs | measured µs (± half the spread) |");
  console.log("| ---: | ---: | ---: | ---: | ---: |");
  for (const r of rows) {
    console.log(`| ${r.subs.toLocaleString("en")} | ${r.bytes} B | ${fmt(mean(r.rates), 0)} | ${r.runs.length} | ${fmt(r.y)} (±${fmt((r.spread * 100) / 2, 0)} %) |`);
  }
  process.exit(0);
}
const pct = (e) => `${e >= 0 ? "+" : ""}${fmt(e * 100, 0)} %`;
console.log(`cells: ${rows.length} (${files.length} file(s)), model ${modelName}, weight ${weight}, field ${field}`);
console.log(`fit (µs): ${model.names.map((n, i) => `${n} = ${fmt(coef[i])}`).join(", ")}`);
// Only the broker's own function has prices; the others are comparisons.
const priced = modelName === "priced";
const [a, b, c] = coef;
const perKib = Math.max(0, Math.round(b / a));
const per1k = Math.max(0, Math.round(c / a));
if (priced) {
  console.log(
    `prices with publish = 1: publish_per_kib = ${perKib} (b/a = ${fmt(b / a, 2)}), publish_per_1k_subscribers = ${per1k} (c/a = ${fmt(c / a, 2)})`,
  );
}
console.log("");
const head = "| subscribers | payload | publishes/s | runs | measured µs (± half the spread) | fit µs | fit error |";
console.log(priced ? `${head} units | units × a µs | units error |` : head);
console.log(`| ---: | ---: | ---: | ---: | ---: | ---: | ---: |${priced ? " ---: | ---: | ---: |" : ""}`);
let maxFit = 0;
let maxUnits = 0;
for (const r of rows) {
  const predicted = model.x(r).reduce((s, x, i) => s + x * coef[i], 0);
  const eFit = (predicted - r.y) / r.y;
  maxFit = Math.max(maxFit, Math.abs(eFit));
  let line = `| ${r.subs.toLocaleString("en")} | ${r.bytes} B | ${fmt(mean(r.rates), 0)} | ${r.runs.length} | ${fmt(r.y)} (±${fmt((r.spread * 100) / 2, 0)} %) | ${fmt(predicted)} | ${pct(eFit)} |`;
  if (priced) {
    const units = 1 + perKib * Math.ceil(r.bytes / 1024) + per1k * Math.floor(r.subs / 1000);
    const eUnits = (units * a - r.y) / r.y;
    maxUnits = Math.max(maxUnits, Math.abs(eUnits));
    line += ` ${units} | ${fmt(units * a)} | ${pct(eUnits)} |`;
  }
  console.log(line);
}
console.log("");
console.log(`max |error|: fit ${fmt(maxFit * 100, 0)} %${priced ? `, rounded prices ${fmt(maxUnits * 100, 0)} %` : ""}`);
const bg = rows.flatMap((r) => r.bg);
console.log(`background CPU during the runs: ${fmt(Math.min(...bg), 2)}–${fmt(Math.max(...bg), 2)} cores`);
