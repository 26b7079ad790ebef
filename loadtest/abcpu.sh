#!/usr/bin/env bash
# CPU per order of two inventoryd binaries, A (this tree's build) against B (--baseline: an older
# commit's), run in turn A B A B ... so each ratio is taken pair by pair while the machine's
# speed drifts (a refactor's "within N %": issue 31). Per run: one redis-server of its own, one
# instance, a SKU of 16 segments, wrk -t2 -c64 for 10 s (order.lua, quantity 1); inventoryd's
# user + system CPU seconds (/proc/PID/stat) over the wrk window, divided by the units sold as
# Redis counts them (GET ?consistent=1), and orders/s. Prints one line per pair and, per
# strategy, the medians of the ratios A/B (never asserted). About 25 s a pair.
#
# Usage: loadtest/abcpu.sh --baseline BIN [--pairs N (3)] [--strategies "segmented atomic"]
# Env: BUILD_DIR (build), INVENTORYD_BIN (A). Exit 0, or 3 when a server did not start.
set -u
cd "$(dirname "$0")/.."
a=${INVENTORYD_BIN:-${BUILD_DIR:-build}/bin/inventoryd} b="" pairs=3 strategies="segmented atomic"
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) b=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    *) echo "usage: $0 --baseline BIN [--pairs N] [--strategies \"segmented atomic\"]" >&2; exit 2 ;;
  esac
done
[ -x "$a" ] && [ -n "$b" ] && [ -x "$b" ] || { echo "abcpu: need $a and --baseline BIN" >&2; exit 2; }
for t in wrk redis-server redis-cli curl python3; do
  command -v $t >/dev/null || { echo "abcpu: $t missing (scripts/deps.sh --bench)" >&2; exit 3; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
d=$(mktemp -d) rport=$(free_port) pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1
  rm -rf "$d"
}
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" --daemonize yes \
  --logfile "$d/redis.log" >/dev/null || exit 3
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

# one BIN STRATEGY: prints "<CPU µs per order> <orders/s>", or fails.
one() {
  local bin=$1 strat=$2 port t0 t1 sold tck
  port=$(free_port)
  redis-cli -p "$rport" flushall >/dev/null
  "$bin" --port "$port" --bind 127.0.0.1 --admin-allow-loopback --redis "redis://127.0.0.1:$rport" \
    --strategy "$strat" >"$d/inventoryd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
  curl -sf -o /dev/null -X PUT -H 'Content-Type: application/json' \
    -d '{"stock":100000000,"segments":16}' "http://127.0.0.1:$port/api/v1/skus/ab" || return 1
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  LT_SKU=ab LT_WINDOW_S=8 wrk -t2 -c64 -d10s --timeout 10s -s loadtest/order.lua \
    "http://127.0.0.1:$port/api/v1/orders" >"$d/wrk.log" 2>&1
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  sold=$(curl -sf "http://127.0.0.1:$port/api/v1/skus/ab?consistent=1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["sold"])') || return 1
  kill "$pid"; wait "$pid" 2>/dev/null; pid=""
  tck=$(getconf CLK_TCK)
  python3 -c "print('%.1f %.0f' % (($t1 - $t0) / $tck / $sold * 1e6, $sold / 10.0))"
}

echo "abcpu: A $a, B $b; $pairs pairs per strategy; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for strat in $strategies; do
  cr="" or=""
  for i in $(seq "$pairs"); do
    ra=$(one "$a" "$strat") || { echo "abcpu: A did not run ($strat)" >&2; exit 3; }
    rb=$(one "$b" "$strat") || { echo "abcpu: B did not run ($strat)" >&2; exit 3; }
    set -- $ra $rb
    c=$(python3 -c "print('%.3f' % ($1 / $3))") o=$(python3 -c "print('%.3f' % ($2 / $4))")
    cr="$cr $c" or="$or $o"
    echo "$strat pair $i: CPU/order A $1 µs, B $3 µs: A/B $c | orders/s A $2, B $4: A/B $o"
  done
  python3 -c "import statistics as s; c=[float(x) for x in '$cr'.split()]; o=[float(x) for x in '$or'.split()]; print('$strat: median A/B CPU per order %.3f (%.3f..%.3f), orders/s %.3f (%.3f..%.3f)' % (s.median(c), min(c), max(c), s.median(o), min(o), max(o)))"
done
