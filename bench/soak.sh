#!/usr/bin/env bash
# The soak (issue 15): MINUTES of churn on one node (default 30), sampling
# the broker's RSS, open descriptors, sockets, channel registry, tokio tasks
# and actors every 10 s into a CSV as it goes, then a JSON summary and an
# SVG chart.
# Not part of the test suite: it is a measurement, minutes long.
#
#   bench/soak.sh [MINUTES] [OUT_DIR]     # default: 30, bench/results
#
# Extra options of the scenario: target/release/tidegate-load soak --help.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-30}"
out="${2:-bench/results}"
mkdir -p "$out"

cargo build --release -p tidegate -p tidegate-bench --bins
load=target/release/tidegate-load
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  load="$CARGO_TARGET_DIR/release/tidegate-load"
fi
"$load" --peer none --out "$out/soak.json" --chart "$out/soak.svg" \
  soak --minutes "$minutes" --csv "$out/soak.csv" >/dev/null
echo "samples: $out/soak.csv, summary: $out/soak.json, chart: $out/soak.svg" >&2
