#!/usr/bin/env bash
# The sell-out tail (issue 22): orders/s over the last 10 % of a SKU's stock against orders/s
# over its first half, while wrk -t2 -c64 buys random quantities 1..5 direct from one instance
# (16 segments, segmented, hold 0) until it is sold out. A poller reads the instance's created
# orders (/metrics) and the SKU's remaining units every 50 ms; head = orders/s while at least
# half the stock is left, tail = orders/s from 10 % left to sold out; and the CPU per order of
# inventoryd (/proc) and of Redis (INFO cpu) over the whole sale, steadier on a shared machine.
# Two builds alternate in one run (A B A B ...), so the machine's drift hits both:
#   A = $BUILD_A/bin/inventoryd (e.g. a build of the commit before a change), B = $BUILD_DIR (build).
# Usage: loadtest/tail.sh [--units N] [--pairs N] [--qmax Q] [--segments S]
#   --units N  stock per run [400000]; --pairs N  A/B pairs [3]; --qmax Q [5]; --segments S [16]
# Not a test (scripts/test.sh does not run it): numbers for docs/performance.md, "The sell-out tail".
set -uo pipefail
cd "$(dirname "$0")/.."
units=400000 pairs=3 qmax=5 segments=16
while [ $# -gt 0 ]; do
  case $1 in
    --units) units=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --qmax) qmax=$2; shift 2 ;;
    --segments) segments=$2; shift 2 ;;
    *) echo "usage: $0 [--units N] [--pairs N] [--qmax Q] [--segments S]" >&2; exit 2 ;;
  esac
done
bin_b=${BUILD_DIR:-build}/bin/inventoryd
bin_a=${BUILD_A:+$BUILD_A/bin/inventoryd}
for t in wrk redis-server redis-cli curl python3; do
  command -v "$t" >/dev/null || { echo "tail: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
[ -x "$bin_b" ] || { echo "tail: no $bin_b (build first)" >&2; exit 3; }
[ -z "$bin_a" ] || [ -x "$bin_a" ] || { echo "tail: no $bin_a" >&2; exit 3; }

tmp=$(mktemp -d /tmp/inventoryd-tail.XXXXXX)
pids=()
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "tail: $*" >&2; exit 3; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; return 1; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done

# run LABEL BIN: one sale; prints "LABEL head_rate tail_rate ratio tail_s multi_orders"
run() {
  local label=$1 bin=$2 port pid
  redis-cli -p "$rport" flushall >/dev/null
  port=$(free_port)
  "$bin" --redis "redis://127.0.0.1:$rport" --port "$port" --bind 127.0.0.1 \
    --admin-allow-loopback >"$tmp/$label.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_http "$port" || die "$label: inventoryd did not start ($(tail -3 "$tmp/$label.log"))"
  rcpu0=$(redis-cli -p "$rport" info cpu | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { print s }')
  curl -sf -XPUT -H 'Content-Type: application/json' \
    -d "{\"stock\":$units,\"segments\":$segments}" \
    "http://127.0.0.1:$port/api/v1/skus/tail" >/dev/null || die "PUT failed"
  LT_SKU=tail LT_QMAX=$qmax LT_WINDOW_S=120 wrk -t2 -c64 -d125s -s loadtest/tail.lua \
    "http://127.0.0.1:$port/api/v1/orders" >"$tmp/$label.wrk" 2>&1 &
  local wrk_pid=$!
  python3 - "$port" "$units" >"$tmp/$label.samples" <<'PY'
import json, sys, time, urllib.request
port, units = int(sys.argv[1]), int(sys.argv[2])
base = f"http://127.0.0.1:{port}"
t0 = time.monotonic()
while time.monotonic() - t0 < 120:
    m = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    created = multi = 0
    for line in m.splitlines():
        if line.startswith('inventory_orders_total{result="created"}'):
            created = int(float(line.split()[-1]))
        if line.startswith('inventory_multi_segment_orders_total '):
            multi = int(float(line.split()[-1]))
    left = json.load(urllib.request.urlopen(base + "/api/v1/skus/tail", timeout=5))["remaining"]
    print(f"{time.monotonic() - t0:.3f} {created} {left} {multi}", flush=True)
    if left == 0:
        break
    time.sleep(0.05)
PY
  kill "$wrk_pid" 2>/dev/null
  wait "$wrk_pid" 2>/dev/null
  # inventoryd's CPU over the sale (user + system, clock ticks) and Redis's (INFO cpu, s)
  local ticks rcpu
  ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  rcpu=$(redis-cli -p "$rport" info cpu | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { print s }')
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  python3 - "$label" "$units" "$tmp/$label.samples" "$ticks" "$(getconf CLK_TCK)" "$rcpu" "${rcpu0:-0}" <<'PY'
import sys
label, units, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ticks, hz, rcpu, rcpu0 = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
rows = [tuple(float(x) for x in l.split()) for l in open(path) if l.strip()]
def at(pred):
    for r in rows:
        if pred(r):
            return r
    return None
start = rows[0]
half = at(lambda r: r[2] <= units * 0.5)
tenth = at(lambda r: r[2] <= units * 0.1)
end = at(lambda r: r[2] == 0)
if not (half and tenth and end):
    print(f"{label} incomplete: the sale did not sell out in 120 s")
    sys.exit(0)
head = (half[1] - start[1]) / (half[0] - start[0])
tail = (end[1] - tenth[1]) / (end[0] - tenth[0])
orders = end[1] - start[1]
cpu = ticks / hz / orders * 1e6 if orders > 0 else 0
rus = (rcpu - rcpu0) / orders * 1e6 if orders > 0 else 0
print(f"{label} {head:.0f} {tail:.0f} {tail / head:.2f} {end[0] - tenth[0]:.2f} {int(end[3])} {cpu:.1f} {rus:.1f}")
PY
}

echo "# loadtest/tail.sh: $units units, $segments segments, quantities 1..$qmax, wrk -t2 -c64 direct; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# build head_orders/s tail_orders/s tail/head tail_seconds multi_segment_orders inventoryd_cpu_us/order redis_cpu_us/order"
for i in $(seq "$pairs"); do
  [ -n "$bin_a" ] && run "A$i" "$bin_a"
  run "B$i" "$bin_b"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
