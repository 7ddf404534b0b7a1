#!/usr/bin/env bash
# Measures the broker's CPU time per publish against fan-out and size, the
# numbers docs/limits.md fits the publish prices to (bench/price-fit.mjs).
#
#   bench/price-measure.sh [OUT_DIR] [RUNS]
#
# Default OUT_DIR bench/results/price, RUNS 3. Each run measures:
#   paced-N.json    every subscribers (0, 10, 100, 1,000, 3,000) × payload
#                   (64 B, 1 KiB, 8 KiB) cell at one paced rate, 20
#                   publishes/s (at most 60,000 deliveries/s: each publish
#                   handled on its own, no batching), with 1 s of idle CPU
#                   measured first and subtracted; the same rate in every
#                   cell, because the fixed cost of a publish depends on
#                   the rate (wake-ups, cold caches), see fast-N.json;
#   fast-N.json     0 and 10 subscribers at 1,000 publishes/s: the same
#                   publishes at a rate where the broker stays awake;
#   max-N.json      closed loop (--rate max, 10 to 3,000 subscribers): the
#                   broker saturated, where it batches writes and a
#                   delivery costs less.
# Broker pinned to core 0 with one worker, load generator on core 1 (the
# load generator does this itself). About 4 minutes a run.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results/price}"
runs="${2:-3}"
mkdir -p "$out"
load="${CARGO_TARGET_DIR:-target}/release/tidegate-load"
payloads=64,1024,8192

for n in $(seq 1 "$runs"); do
  echo "== run $n: paced, 20 publishes/s" >&2
  "$load" --peer none --out "$out/paced-$n.json" fanout --subscribers 0,10,100,1000,3000 \
    --payload "$payloads" --rate 20 --idle 1 --warmup 1 --duration 5 >/dev/null
  echo "== run $n: 1,000 publishes/s" >&2
  "$load" --peer none --out "$out/fast-$n.json" fanout --subscribers 0,10 \
    --payload "$payloads" --rate 1000 --idle 1 --warmup 1 --duration 3 >/dev/null
  echo "== run $n: closed loop" >&2
  "$load" --peer none --out "$out/max-$n.json" fanout --subscribers 10,100,1000,3000 \
    --payload "$payloads" --rate max --idle 1 --warmup 1 --duration 3 >/dev/null
done

echo "paced, 20 publishes/s (net of idle CPU):" >&2
node bench/price-fit.mjs "$out"/paced-*.json
echo "closed loop:" >&2
node bench/price-fit.mjs "$out"/max-*.json
