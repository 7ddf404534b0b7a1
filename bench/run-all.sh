#!/usr/bin/env bash
# Runs every load-generator scenario with the parameters the README's
# numbers come from, writing one JSON result and one SVG chart per
# scenario into an output directory (default: bench/results).
#
#   bench/run-all.sh [OUT_DIR] [scenario ...]
#
# Builds the release broker and load generator first. TIDEGATE_BIN picks
# another broker binary (for example one built with a proposal applied).
# Every run is bounded: at most 5,000 connections at a time and a few
# seconds per measurement; the whole set takes about ten minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results}"
shift || true
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=(fanout relay latency idle handshakes behaviours storm slow webhooks)
fi
mkdir -p "$out"

cargo build --release -p tidegate -p tidegate-bench --bins
load=target/release/tidegate-load
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  load="$CARGO_TARGET_DIR/release/tidegate-load"
fi

run() {
  local name="$1"
  shift
  echo "== $name: $*" >&2
  "$load" --out "$out/$name.json" --chart "$out/$name.svg" "$@" >/dev/null
}

for s in "${scenarios[@]}"; do
  case "$s" in
    fanout)
      run fanout fanout --subscribers 1000,5000 --payload 64,1024 \
        --rate max --window 64 --warmup 1 --duration 5 ;;
    relay)
      # Tidegate, NATS and the minimal relay (src/relay.rs) side by side.
      run fanout-relay --peer nats,relay fanout --subscribers 100,1000 \
        --payload 64,1024 --rate max --window 64 --warmup 1 --duration 3 ;;
    latency)
      # A paced load both brokers carry with CPU to spare: 1,000
      # subscribers, 100 publishes/s (100,000 deliveries/s, each its own
      # write: about half a core for either broker).
      run latency fanout --subscribers 1000 --payload 64,1024 \
        --rate 100 --warmup 1 --duration 5 ;;
    idle)
      run idle idle --connections 5000 --hold 2 ;;
    handshakes)
      run handshakes handshakes --concurrency 50 --duration 5 ;;
    behaviours)
      run behaviours --peer none behaviours --duration 3 ;;
    storm)
      run storm --peer none storm --clients 4000 --mode both ;;
    slow)
      run slow --peer none slow --subscribers 50 --rate 2000 --payload 1024 --duration 10 ;;
    webhooks)
      run webhooks --peer none webhooks --events 10000 --failing error ;;
    *)
      echo "unknown scenario: $s" >&2
      exit 2 ;;
  esac
done
echo "results in $out" >&2
