#!/usr/bin/env bash
# What one part of an order served from several segments costs (issue 22, SPEC §13): one
# instance, one Redis, a SKU of S segments holding U units each; orders of U x P units sent one
# at a time (so each takes P whole segments), for P = 1 (a one-segment order) and the P given;
# per order: Redis calls (INFO commandstats, every command), Redis µs (their usec) and the
# answer's latency (curl). Usage: loadtest/multicost.sh [--segments S] [--units U] [--parts "1 2 4 8"]
# Not a test: numbers for docs/performance.md, "Orders larger than one segment".
set -uo pipefail
cd "$(dirname "$0")/.."
segments=256 units=1 parts="1 2 4 8 16"
while [ $# -gt 0 ]; do
  case $1 in
    --segments) segments=$2; shift 2 ;;
    --units) units=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "usage: $0 [--segments S] [--units U] [--parts LIST]" >&2; exit 2 ;;
  esac
done
bin=${BUILD_DIR:-build}/bin/inventoryd
[ -x "$bin" ] || { echo "multicost: no $bin" >&2; exit 3; }
tmp=$(mktemp -d /tmp/inventoryd-multicost.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port) port=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
"$bin" --redis "redis://127.0.0.1:$rport" --port "$port" --bind 127.0.0.1 --admin-allow-loopback \
  --max-quantity 100000 --order-redis-call-budget 100000 >"$tmp/i.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
J='Content-Type: application/json'
stats() { redis-cli -p "$rport" info commandstats | awk -F'[:=,]' '/^cmdstat_/ { c += $3; u += $5 } END { print c, u }'; }
echo "# loadtest/multicost.sh: $segments segments of $units units, one order at a time; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# parts  orders  redis_calls/order  redis_us/order  ms/order  redis_calls/part  redis_us/part"
for p in $parts; do
  curl -sf -XPUT -H "$J" -d "{\"stock\":$((segments * units)),\"segments\":$segments}" \
    "http://127.0.0.1:$port/api/v1/skus/mc" >/dev/null || { echo "PUT failed" >&2; exit 3; }
  sleep 0.2
  q=$((p * units)) n=$((segments / p))
  redis-cli -p "$rport" config resetstat >/dev/null
  t0=$(date +%s%N) ok=0
  for ((i = 0; i < n; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST -H "$J" -d "{\"sku\":\"mc\",\"quantity\":$q}" \
      "http://127.0.0.1:$port/api/v1/orders")
    [ "$code" = 201 ] && ok=$((ok + 1))
  done
  t1=$(date +%s%N)
  read -r calls usec < <(stats)
  awk -v p="$p" -v n="$ok" -v c="$calls" -v u="$usec" -v ns=$((t1 - t0)) 'BEGIN {
    printf "%5d  %6d  %17.1f  %14.1f  %8.2f  %16.1f  %13.1f\n", p, n, c / n, u / n, ns / n / 1e6, c / n / p, u / n / p }'
done
