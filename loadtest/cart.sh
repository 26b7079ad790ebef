#!/usr/bin/env bash
# The cart benchmarks of issue 33 (SPEC §17), every ratio taken within one run (the machine is
# shared and noisy): one private redis-server, one inventoryd (default --threads), SKUs c0..c4 of
# 16 segments and 10^9 units each (never sold out), on free ports.
#
#   a  lines per second: single-SKU orders (order.lua on c0) against 2-item carts (cart.lua,
#      items c0 and c1), wrk -t2 -c32, the runs interleaved (single, cart, single, cart, ...) and
#      the ratio taken from the medians; lines/s = carts/s × 2.     target: ≥ 0.5× single orders/s
#   b  what one more item costs: carts of 1..5 items (1 = a single-SKU body) sent one at a time by
#      one client; per cart, Redis commands (INFO commandstats: every command, those the scripts
#      run included), Redis µs (their usec) and the answer's latency; "this item" = cost(k) −
#      cost(k − 1) of the sizes listed (from 1, a single-SKU order, to 2: the cart's own steps
#      and its second item).
#   c  carts under contention through nginx (the shipped config, config/nginx-lb.conf.template)
#      and 3 instances: carts of a random 2-5 of c0..c4 (in a random order, 1-2 units each) from
#      wrk -t2 -c64 until the SKUs (400 units in 4 segments each) sell out; then every SKU's
#      SPEC §8 with inventory-check's cart checks (every part of every cart there, none without
#      its cart: 0 partial carts; no intent left) and its units sold = the units of the 201
#      answers' items (cart.lua's CARTUNITS).
# The single-SKU A/B (this build against the one before carts) is loadtest/abcpu.sh --baseline.
# Every wrk run is checked with loadtest/verify.sh on every SKU it touched (SPEC §8: the units
# wrk counted in 201 answers equal what Redis sold, per SKU).
#
# Usage: loadtest/cart.sh [--window S] [--rounds N] [--items "1 2 3 4 5"] [--count N] [--skip a,b,c]
#                         [--out FILE]
#   --window S   seconds per wrk run [6]
#   --rounds N   a's runs per kind, interleaved [3]
#   --items L    b's cart sizes [1 2 3 4 5]
#   --count N    b's carts per size [300]
#   --out FILE   also write the table (markdown) to FILE
# Env: BUILD_DIR (build), INVENTORYD_BIN. Exit 0 every invariant check passed, 1 one failed, 2
# usage, 3 infrastructure. Performance targets are reported, never asserted.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
bin=${INVENTORYD_BIN:-${BUILD_DIR:-build}/bin/inventoryd}
window=6 rounds=3 sizes="1 2 3 4 5" count=300 skip="" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --window) window=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --items) sizes=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--window S] [--rounds N] [--items L] [--count N] [--skip a,b,c] [--out FILE]" >&2; exit 2 ;;
  esac
done
skipped() { [[ ",$skip," == *",$1,"* ]]; }
for t in wrk redis-server redis-cli curl python3 nginx; do
  command -v "$t" >/dev/null || { echo "cart.sh: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
[ -x "$bin" ] || { echo "cart.sh: no $bin (build first)" >&2; exit 3; }
tmp=$(mktemp -d /tmp/inventoryd-cart.XXXXXX)
chmod 755 "$tmp" # the nginx worker (nobody when started as root) reaches its temp directory
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "cart.sh: $*" >&2; exit 3; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }

rport=$(free_port) port=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
"$bin" --redis "redis://127.0.0.1:$rport" --port "$port" --bind 127.0.0.1 --admin-allow-loopback \
  >"$tmp/inventoryd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" || die "inventoryd did not start ($tmp/inventoryd.log)"
url="http://127.0.0.1:$port"
J='Content-Type: application/json'
stock=1000000000
fill() { # every SKU c0..c4 back to a fresh layout
  for s in c0 c1 c2 c3 c4; do
    curl -sf -o /dev/null -XPUT -H "$J" -d "{\"stock\":$stock,\"segments\":16}" "$url/api/v1/skus/$s" ||
      die "PUT $s failed"
  done
}
failed=0
check() { # SKU UNITS [ORDERS]: SPEC §8 for one SKU after a run (a cart's other SKUs hold parts,
  # which cnt.o never counts: no ORDERS for them)
  if ! loadtest/verify.sh --redis-port "$rport" --sku "$1" --units "$2" ${3:+--orders "$3"} \
    --stock-total "$stock" >"$tmp/verify.log" 2>&1; then
    echo "cart.sh: verify.sh failed for $1:" >&2
    cat "$tmp/verify.log" >&2
    failed=1
  fi
}
echo "# loadtest/cart.sh: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), window ${window}s"
rows=()

if ! skipped a; then
  singles="" carts=""
  for r in $(seq "$rounds"); do
    fill
    res=$(LT_SKU=c0 LT_WINDOW_S=$window wrk -t2 -c32 -d$((window + 4))s --timeout 10s \
      -s loadtest/order.lua "$url/api/v1/orders" 2>&1 | grep '^RESULT') || die "wrk (single) failed"
    check c0 "$(field units "$res")" "$(field created "$res")"
    srate=$(field rate "$res")
    singles="$singles $srate"
    fill
    res=$(LT_SKUS=c0,c1 LT_WINDOW_S=$window wrk -t2 -c32 -d$((window + 4))s --timeout 10s \
      -s loadtest/cart.lua "$url/api/v1/orders" 2>&1 | grep '^RESULT') || die "wrk (cart) failed"
    created=$(field created "$res")
    check c0 "$created" "$created"
    check c1 "$created"
    carts="$carts $(field rate "$res")"
    echo "round $r: single orders/s $srate | 2-item carts/s $(field rate "$res") (p99 $(field p99_us "$res") µs)"
  done
  line=$(python3 -c "
import statistics as s
a=[float(x) for x in '$singles'.split()]; b=[float(x) for x in '$carts'.split()]
ma, mb = s.median(a), s.median(b)
print('| a | single orders/s %.0f (%s) | 2-item carts/s %.0f = %.0f lines/s (%s) | lines/s ÷ orders/s %.2f | %s |' % (
  ma, ', '.join('%.0f' % x for x in a), mb, 2 * mb, ', '.join('%.0f' % x for x in b), 2 * mb / ma,
  'meets (≥ 0.5)' if 2 * mb / ma >= 0.5 else 'falls short (< 0.5)'))")
  echo "$line"
  rows+=("$line")
fi

if ! skipped b; then
  prev_c="" prev_u="" prev_k=""
  for k in $sizes; do
    fill
    redis-cli -p "$rport" config resetstat >/dev/null
    t=$(python3 - "$port" "$k" "$count" <<'EOF'
import http.client, json, sys, time
port, k, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if k == 1:
    body = json.dumps({"sku": "c0", "quantity": 1})
else:
    body = json.dumps({"items": [{"sku": "c%d" % i, "quantity": 1} for i in range(k)]})
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
ok, t0 = 0, time.monotonic()
for _ in range(n):
    c.request("POST", "/api/v1/orders", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    ok += r.status == 201
print(ok, (time.monotonic() - t0) / n * 1000)
EOF
    ) || die "the sequential client failed"
    read -r ok ms <<<"$t"
    [ "$ok" = "$count" ] || { echo "cart.sh: $k items: $ok of $count carts were 201" >&2; failed=1; }
    read -r calls usec < <(redis-cli -p "$rport" info commandstats |
      awk -F'[:=,]' '/^cmdstat_/ { c += $3; u += $5 } END { print c, u }')
    check c0 "$ok" "$ok"
    for ((i = 1; i < k; i++)); do check "c$i" "$ok"; done
    line=$(awk -v k="$k" -v n="$ok" -v c="$calls" -v u="$usec" -v ms="$ms" -v pc="$prev_c" \
      -v pu="$prev_u" -v pk="$prev_k" 'BEGIN {
      extra = (pc != "") ? sprintf("%.1f commands, %.1f µs (from %d to %d items)", (c / n - pc) / (k - pk), (u / n - pu) / (k - pk), pk, k) : "-"
      printf "| b | %d item(s) | %.1f Redis commands/cart | %.1f Redis µs/cart | %.2f ms/cart | each item more: %s |", k, c / n, u / n, ms, extra }')
    prev_c=$(awk -v c="$calls" -v n="$ok" 'BEGIN { print c / n }') prev_u=$(awk -v u="$usec" -v n="$ok" 'BEGIN { print u / n }') prev_k=$k
    echo "$line"
    rows+=("$line")
  done
fi

if ! skipped c; then
  # two more instances on the same Redis, nginx in front of the three
  ups="        server 127.0.0.1:$port;"
  for i in 2 3; do
    p=$(free_port)
    "$bin" --redis "redis://127.0.0.1:$rport" --port "$p" --bind 127.0.0.1 --admin-allow-loopback \
      >"$tmp/inventoryd$i.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$p/healthz" && break; sleep 0.1; done
    curl -sf -o /dev/null "http://127.0.0.1:$p/healthz" || die "instance $i did not start"
    ups="$ups
        server 127.0.0.1:$p;"
  done
  nport=$(free_port)
  mkdir -p "$tmp/nginx/tmp"
  awk -v run="$tmp/nginx" -v listen="127.0.0.1:$nport" -v ups="$ups" '
    /^[[:space:]]*#/ { print; next }
    { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
    /@UPSTREAM_SERVERS@/ { print ups; next }
    { print }' "${LT_NGINX_TEMPLATE:-config/nginx-lb.conf.template}" >"$tmp/nginx/nginx.conf"
  nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log" >"$tmp/nginx.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$nport/nginx-204" && break; sleep 0.1; done
  curl -sf -o /dev/null "http://127.0.0.1:$nport/nginx-204" || die "nginx did not start ($tmp/nginx/error.log)"
  cstock=400
  for s in c0 c1 c2 c3 c4; do
    curl -sf -o /dev/null -XPUT -H "$J" -d "{\"stock\":$cstock,\"segments\":4}" "$url/api/v1/skus/$s" ||
      die "PUT $s failed"
  done
  out_c=$(LT_SKUS=c0,c1,c2,c3,c4 LT_MIX=1 LT_WINDOW_S=$window wrk -t2 -c64 -d$((window + 4))s \
    --timeout 10s -s loadtest/cart.lua "http://127.0.0.1:$nport/api/v1/orders" 2>&1) || die "wrk (c) failed"
  res=$(grep '^RESULT' <<<"$out_c") units_line=$(grep '^CARTUNITS' <<<"$out_c")
  un=$(field unanswered "$res") sold_all="" c_failed=0
  for s in c0 c1 c2 c3 c4; do
    u=$(sed -n "s/.* $s=\([0-9]*\).*/\1/p" <<<" $units_line")
    if ! loadtest/verify.sh --redis-port "$rport" --sku "$s" --units "${u:-0}" --unanswered "$un" \
      --max-qty 2 --stock-total "$cstock" >"$tmp/verify.log" 2>&1; then
      echo "cart.sh: verify.sh failed for $s (c):" >&2
      cat "$tmp/verify.log" >&2
      failed=1 c_failed=1
    fi
    sold_all="$sold_all $s ${u:-0}"
  done
  line="| c | through nginx + 3 instances: $(field created "$res") carts 201, $(field s409 "$res") 409, $(field s503 "$res") 503, unanswered $un | units in 201 answers:$sold_all (of $cstock each) | SPEC §8 + 0 partial carts (inventory-check) | $([ "$c_failed" = 0 ] && echo "held" || echo "FAILED") | p99 $(field p99_us "$res") µs |"
  echo "$line"
  rows+=("$line")
fi

if [ -n "$out" ]; then
  { echo "| run | | | | | |"; echo "|---|---|---|---|---|---|"; printf '%s\n' "${rows[@]}"; } >"$out"
fi
exit "$failed"
