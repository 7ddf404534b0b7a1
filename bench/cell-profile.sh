#!/bin/bash
# Profiles the broker of one fan-out cell: the load generator starts one
# broker per cell, and this attaches to the Nth (counting from 1) once its
# subscribers are connected.
#
#   bench/cell-profile.sh perf      BIN N SUBS OUT -- <tidegate-load args>
#   bench/cell-profile.sh callgrind BIN N SUBS OUT -- <tidegate-load args>
#
# perf:      `perf record -F 999 -g` of the broker for 5 s, into OUT.
# callgrind: the broker runs under `valgrind --tool=callgrind --cache-sim=yes
#            --instr-atstart=no` (full speed until switched on), and is
#            instrumented for 12 s of publishing; the dump is OUT.*.out.1.
# Example (stop 53, GraphQL at 5,000; the GraphQL cell is the second):
#   bench/cell-profile.sh callgrind target/release/tidegate 2 5000 /tmp/cg -- \
#     --peer graphql fanout --subscribers 5000 --payload 64 --duration 25
# TIDEGATE_BENCH_SHIPPED_CONFIG is passed through (an older binary's config).
# Loopback only; every process it starts ends with the load generator's run.
set -euo pipefail
mode=$1 bin=$(realpath "$2") nth=$3 subs=$4 out=$5
shift 5
[ "${1:-}" = "--" ] && shift
load=${TIDEGATE_LOAD:-target/release/tidegate-load}
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT
case $mode in
perf) target=$bin ;;
callgrind)
    target=$wrap/broker
    printf '#!/bin/sh\nexec valgrind --tool=callgrind --cache-sim=yes --instr-atstart=no --callgrind-out-file=%s.%%p.out %s "$@"\n' \
        "$out" "$bin" > "$target"
    chmod +x "$target"
    ;;
*) echo "mode: perf or callgrind" >&2; exit 2 ;;
esac
"$load" --tidegate-bin "$target" "$@" > "$out.log" 2>&1 &
lp=$!
# The Nth broker started after this point: a child of the load generator.
seen=()
while :; do
    kill -0 $lp 2>/dev/null || { echo "the load generator ended first (see $out.log)" >&2; exit 1; }
    for p in $(pgrep -P $lp || true); do
        [[ " ${seen[*]:-} " == *" $p "* ]] || seen+=("$p")
    done
    [ ${#seen[@]} -ge "$nth" ] && break
    sleep 0.2
done
pid=${seen[$((nth - 1))]}
# Connected: one descriptor a subscriber, at least.
while [ "$(ls /proc/$pid/fd 2>/dev/null | wc -l)" -lt "$subs" ]; do
    kill -0 $pid 2>/dev/null || { echo "broker $pid ended" >&2; exit 1; }
    sleep 0.5
done
sleep 4 # the cell's warm-up, then publishing
case $mode in
perf) perf record -F 999 -g -p $pid -o "$out" -- sleep 5 > /dev/null 2>&1 ;;
callgrind)
    callgrind_control -z $pid > /dev/null
    callgrind_control -i on $pid > /dev/null
    sleep 12
    callgrind_control -d $pid > /dev/null
    callgrind_control -i off $pid > /dev/null
    ;;
esac
wait $lp
echo "profiled broker $pid: $out"
