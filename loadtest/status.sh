#!/usr/bin/env bash
# The stock-status benchmarks of issue 30 (SPEC §15), every ratio taken within one run (the
# machine is shared and noisy): a private redis-server, one inventoryd (default --threads), the
# bare libmicrohttpd handler (loadtest/bare_handler.c, the HTTP ceiling) and nginx with the
# shipped config (config/nginx-lb.conf.template and its status cache), on free ports. One SKU of
# 16 segments (1e9 units, never sells out). wrk -t2 unless said.
#
#   a  status reads direct vs the bare handler (-c64, loadtest/poll.lua on both), and the 304s
#      (If-None-Match: the current ETag)                    target: status ≥ 0.8× bare, 304 above
#   b  Redis calls per second spent on status, at 64 and at 2,000 pollers (-c2000): INFO
#      commandstats deltas over the run minus the idle rate measured first with no traffic (the
#      sweeper's); target: ≤ (1000 / refresh ms) × SKUs × instances = 4/s, whatever the pollers
#   c  orders/s (wrk -t1 -c32, loadtest/order.lua) beside a status storm (wrk -t1 -c64 polling)
#      aimed at inventoryd's status, and beside the same storm aimed at the bare handler, and
#      alone                                                target: storm on status ≥ 0.8× storm on bare
#   d  through nginx and its cache (-c16 and -c256): Redis calls/s on status must not follow the
#      request rate; the instance's status answers and nginx's X-Cache-Status say why
# Every order run is checked afterwards with loadtest/verify.sh (SPEC §8, the exact read).
# "Redis calls" are script calls (EVALSHA/EVAL: one per refresh since the snapshot, one per
# segment per read before it); "commands" adds what those scripts run (total_commands_processed). The old binary (before the snapshot) has
# no ETag, no --status-refresh-ms and no refresh counter: those cells are "-".
#
# Usage: loadtest/status.sh [--window S] [--rounds N] [--refresh-ms MS] [--skip RUNS] [--out FILE]
#   --window S       seconds per run [6]
#   --rounds N       a and c are measured N times, their runs interleaved (bare, status, 304,
#                    bare, ...), and the ratios taken from the medians: the load of other
#                    processes moves within a run too [3]
#   --refresh-ms MS  the instance's --status-refresh-ms [its default, 250]
#   --skip RUNS      comma-separated subset of a,b,c,d not to run
#   --out FILE       also write the table (markdown) to FILE
# Env: BUILD_DIR (build; bin/inventoryd and bin/bare_handler), INVENTORYD_BIN (another inventoryd:
# e.g. main before the snapshot, built from 12b4142 in its own build dir), LT_NGINX_TEMPLATE (the
# nginx config rendered; default config/nginx-lb.conf.template), LT_RESULTS_DIR (loadtest/results).
# Exit 0 all invariant checks passed, 1 one failed, 2 usage, 3 infrastructure (a server did not
# start, wrk missing). Performance targets are reported ("meets"/"falls short"), never asserted.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
lt=loadtest
bin=${INVENTORYD_BIN:-${BUILD_DIR:-build}/bin/inventoryd}
bare=${BUILD_DIR:-build}/bin/bare_handler
template=${LT_NGINX_TEMPLATE:-config/nginx-lb.conf.template}
window=6 rounds=3 refresh="" skip="" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --window) window=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --refresh-ms) refresh=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--window S] [--rounds N] [--refresh-ms MS] [--skip a,b,c,d] [--out FILE]" >&2; exit 2 ;;
  esac
done
skipped() { [[ ",$skip," == *",$1,"* ]]; }
for t in wrk redis-server redis-cli curl nginx python3; do
  command -v "$t" >/dev/null || { echo "status.sh: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
[ -x "$bin" ] || { echo "status.sh: no $bin (build first)" >&2; exit 3; }
[ -x "$bare" ] || { echo "status.sh: no $bare (cmake --build ${BUILD_DIR:-build} --target bare_handler)" >&2; exit 3; }
# -c2000 needs 2,000+ descriptors in wrk and in the instance (which raises its own soft limit).
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge 4200 ] || { echo "status.sh: ulimit -n $(ulimit -n): 2,000 pollers need more" >&2; exit 3; }

# The nginx worker (nobody when started as root) must reach its cache: a 755 directory.
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "status.sh: $*" >&2; exit 3; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
rcli() { redis-cli -p "$rport" "$@"; }

bport=$(free_port)
"$bare" "$bport" 2 2>"$tmp/bare.log" &
pids+=($!)
wait_http "http://127.0.0.1:$bport/healthz" || die "the bare handler did not start"

# inventoryd: --status-refresh-ms only when this binary knows it (not before the snapshot).
iport=$(free_port)
has_snap=0
help=$("$bin" --help 2>&1) # (not piped into grep -q: with pipefail its early exit would count)
grep -q -- '--status-refresh-ms' <<<"$help" && has_snap=1
iargs=(--port "$iport" --bind 127.0.0.1 --redis "redis://127.0.0.1:$rport" --admin-token tok
  --log-level warn)
[ "$has_snap" = 1 ] && [ -n "$refresh" ] && iargs+=(--status-refresh-ms "$refresh")
[ "$has_snap" = 1 ] && refresh=${refresh:-250}
"$bin" "${iargs[@]}" >"$tmp/inventoryd.log" 2>&1 &
ipid=$!
pids+=("$ipid")
wait_http "http://127.0.0.1:$iport/readyz" || { cat "$tmp/inventoryd.log" >&2; die "inventoryd did not start"; }
sku=st
curl -sf -X PUT -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' \
  -d '{"stock":1000000000,"segments":16}' "http://127.0.0.1:$iport/api/v1/skus/$sku" >/dev/null \
  || die "PUT of the SKU failed"
# one order and one read first, so the layout and the snapshot exist before the counts start
curl -sf -X POST -H 'Content-Type: application/json' -d "{\"sku\":\"$sku\",\"quantity\":1}" \
  "http://127.0.0.1:$iport/api/v1/orders" >/dev/null || die "the first order failed"
orders_before=1
status_url=http://127.0.0.1:$iport/api/v1/skus/$sku

# nginx with the shipped config in front of the instance.
nport=$(free_port)
mkdir -p "$tmp/nginx/tmp"
awk -v run="$tmp/nginx" -v listen="127.0.0.1:$nport" -v ups="        server 127.0.0.1:$iport;" '
  /^[[:space:]]*#/ { print; next }
  { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
  /@UPSTREAM_SERVERS@/ { print ups; next }
  { print }' "$template" >"$tmp/nginx/nginx.conf"
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log" >"$tmp/nginx.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$nport/nginx-204" || { cat "$tmp/nginx/error.log" >&2; die "nginx did not start"; }

# --- counters -------------------------------------------------------------------------------

# "calls inner" so far: script calls (EVAL, EVALSHA, their _RO forms, FCALL: top-level by
# construction, and every status read is scripts, before the snapshot too: one per segment) and
# every command processed (those the scripts run included; INFO commandstats counts both).
redis_counts() {
  local calls total
  calls=$(rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
    /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro):/ { n += $3 }
    END { printf "%d", n }')
  total=$(rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed:\([0-9]*\)/\1/p')
  echo "$calls $total"
}
# the instance's counter NAME (summed over its label sets); "" when it has none
metric() {
  curl -sf --max-time 5 "http://127.0.0.1:$iport/metrics" | awk -v m="$1" '
    index($0, m) == 1 && (substr($0, length(m) + 1, 1) == "{" || substr($0, length(m) + 1, 1) == " ") { n += $NF; seen = 1 }
    END { if (seen) printf "%d", n }'
}
now_ns() { date +%s%N; }

# The idle rate: what Redis serves with no traffic at all (the sweeper, the registry watch...).
sleep 1
read -r c0 i0 < <(redis_counts); t0=$(now_ns)
sleep "$window"
read -r c1 i1 < <(redis_counts); t1=$(now_ns)
idle_calls=$(awk -v a="$c0" -v b="$c1" -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", (b - a) / (ns / 1e9) }')
idle_inner=$(awk -v a="$i0" -v b="$i1" -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", (b - a) / (ns / 1e9) }')
echo "idle: $idle_calls Redis calls/s, $idle_inner commands/s (inner included)" >&2

failed=0
rows=()
# poll NAME URL CONNS [ETAG]: wrk -t2 polling URL for the window; one row with the rate, the
# Redis calls/s minus idle, the instance's refreshes/s and status answers/s.
poll() {
  local name=$1 url=$2 conns=$3 etag=${4:-}
  local base=${url#http://*/} ca ia cb ib ta tb ra rb sa sb res
  local host=${url%%/api/*}
  host=${host%/}
  read -r ca ia < <(redis_counts); ra=$(metric inventory_status_refreshes_total)
  sa=$(metric inventory_status_answers_total); ta=$(now_ns)
  res=$(cd $lt && LT_PATH="/$base" LT_ETAG="$etag" wrk -t2 -c"$conns" -d"${window}s" --timeout 10s \
    -s poll.lua "$host" 2>"$tmp/$name.wrk.err" | grep '^RESULT')
  tb=$(now_ns); read -r cb ib < <(redis_counts); rb=$(metric inventory_status_refreshes_total)
  sb=$(metric inventory_status_answers_total)
  [ -n "$res" ] || { cat "$tmp/$name.wrk.err" >&2; die "wrk failed in $name"; }
  local s=$(((tb - ta) / 1000000))
  local calls inner refr ans
  calls=$(awk -v a="$ca" -v b="$cb" -v ms="$s" -v idle="$idle_calls" 'BEGIN { printf "%.1f", (b - a) / (ms / 1e3) - idle }')
  inner=$(awk -v a="$ia" -v b="$ib" -v ms="$s" -v idle="$idle_inner" 'BEGIN { printf "%.0f", (b - a) / (ms / 1e3) - idle }')
  refr=-; [ -n "$ra" ] && [ -n "$rb" ] && refr=$(awk -v a="$ra" -v b="$rb" -v ms="$s" 'BEGIN { printf "%.1f", (b - a) / (ms / 1e3) }')
  ans=-; [ -n "$sa" ] && [ -n "$sb" ] && ans=$(awk -v a="$sa" -v b="$sb" -v ms="$s" 'BEGIN { printf "%.1f", (b - a) / (ms / 1e3) }')
  local errs=$(($(field sock_connect "$res") + $(field sock_read "$res") + $(field sock_write "$res") + $(field sock_timeout "$res")))
  rows+=("$name|$conns|$(field rate "$res")|$(field s200 "$res")|$(field s304 "$res")|$(field other "$res")|$errs|$(awk -v u="$(field p99_us "$res")" 'BEGIN { printf "%.1f", u / 1000 }')|$calls|$inner|$refr|$ans")
  local kind=${name%_r[0-9]*}
  eval "rates_$kind+=\" $(field rate "$res")\""
  eval "calls_$kind+=\" $calls\""
  printf '%-14s -c%-5s rate=%s 200=%s 304=%s other=%s sock_err=%s redis_calls/s=%s inner/s=%s refreshes/s=%s instance_answers/s=%s\n' \
    "$name" "$conns" "$(field rate "$res")" "$(field s200 "$res")" "$(field s304 "$res")" \
    "$(field other "$res")" "$errs" "$calls" "$inner" "$refr" "$ans" >&2
}

# storm NAME TARGET_URL: orders (wrk -t1 -c32) for the window beside a storm (wrk -t1 -c64
# polling TARGET_URL, or none when it is "-") that starts a second before and ends after.
orows=()
storm() {
  local name=$1 target=$2 spid="" res sres=""
  if [ "$target" != - ]; then
    local host=${target%%/api/*} path=/${target#http://*/}
    (cd $lt && LT_PATH="$path" wrk -t1 -c64 -d"$((window + 4))s" --timeout 10s -s poll.lua "$host" \
      >"$tmp/$name.storm.txt" 2>&1) &
    spid=$!
    sleep 1
  fi
  res=$(cd $lt && LT_SKU=$sku LT_QTY=1 LT_OK=201 LT_WINDOW_S=$window wrk -t1 -c32 \
    -d"$((window + 3))s" --timeout 10s -s order.lua "http://127.0.0.1:$iport/api/v1/orders" \
    2>"$tmp/$name.wrk.err" | grep '^RESULT')
  [ -n "$spid" ] && { wait "$spid"; sres=$(grep '^RESULT' "$tmp/$name.storm.txt"); }
  [ -n "$res" ] || { cat "$tmp/$name.wrk.err" >&2; die "wrk failed in $name"; }
  orders_before=$((orders_before + $(field created "$res")))
  units_total=$((${units_total:-1} + $(field units "$res")))
  unanswered_total=$((${unanswered_total:-0} + $(field unanswered "$res") + $(field s503_unknown "$res")))
  orows+=("$name|$(field rate "$res")|$(awk -v u="$(field p99_us "$res")" 'BEGIN { printf "%.1f", u / 1000 }')|$(field s503 "$res")|$(field unanswered "$res")|${sres:+$(field rate "$sres")}")
  local kind=${name%_r[0-9]*}
  eval "orders_$kind+=\" $(field rate "$res")\""
  printf '%-14s orders/s=%s p99_us=%s 503=%s storm_rate=%s\n' "$name" "$(field rate "$res")" \
    "$(field p99_us "$res")" "$(field s503 "$res")" "${sres:+$(field rate "$sres")}" >&2
}

# median LIST: the median of the numbers in LIST ("-" when empty)
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
etag=""
if ! skipped a; then
  for ((r = 1; r <= rounds; r++)); do
    poll "bare_r$r" "http://127.0.0.1:$bport/api/v1/skus/$sku" 64
    poll "status_r$r" "$status_url" 64
    # the current ETag (a refresh may have changed it: an order of c sells a unit)
    etag=$(curl -sf -D - -o /dev/null "$status_url" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: //p')
    if [ -n "$etag" ]; then poll "status304_r$r" "$status_url" 64 "$etag"; fi
  done
fi
if ! skipped b; then
  skipped a && poll status "$status_url" 64
  poll status2000 "$status_url" 2000
fi
if ! skipped c; then
  for ((r = 1; r <= rounds; r++)); do
    storm "alone_r$r" -
    storm "beside_bare_r$r" "http://127.0.0.1:$bport/api/v1/skus/$sku"
    storm "beside_status_r$r" "$status_url"
  done
fi
if ! skipped d; then
  poll nginx16 "http://127.0.0.1:$nport/api/v1/skus/$sku" 16
  poll nginx256 "http://127.0.0.1:$nport/api/v1/skus/$sku" 256
  curl -s -D - -o /dev/null "http://127.0.0.1:$nport/api/v1/skus/$sku" | tr -d '\r' | grep -i '^x-cache-status' >"$tmp/xcache" || true
fi

# SPEC §8 after every order: the first one and the storms' (the exact read from Redis).
verdict=-
if ! skipped c; then
  if $lt/verify.sh --redis-port "$rport" --sku "$sku" --units "$units_total" --orders "$orders_before" \
       --unanswered "$unanswered_total" --stock-total 1000000000 >"$tmp/verify.txt" 2>&1; then
    verdict=ok
  else
    verdict=VIOLATED; failed=1; tail -5 "$tmp/verify.txt" >&2
  fi
fi

report_dir=${LT_RESULTS_DIR:-$lt/results}/$(date -u +%Y%m%dT%H%M%SZ)-status
mkdir -p "$report_dir"
report=$report_dir/REPORT.md
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
meets() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "-") print "not measured"; else if (r + 0 >= t) print "meets"; else print "falls short" }'; }
bound=-
[ -n "$refresh" ] && bound=$(awk -v r="$refresh" 'BEGIN { printf "%.1f", 1000 / r }')
{
  echo "# loadtest/status.sh — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "One instance ($bin$([ -n "${INVENTORYD_BIN:-}" ] || echo ", this tree at $(git rev-parse --short HEAD 2>/dev/null)")), --status-refresh-ms ${refresh:-none (before the snapshot)}, one SKU of 16 segments;"
  echo "window $window s per run; idle Redis (no traffic: the sweeper) $idle_calls script calls/s, $idle_inner commands/s, subtracted below;"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| run | connections | answers/s | 200 | 304 | other | socket errors | p99 ms | Redis script calls/s on status | Redis commands/s on status (scripts' own incl.) | refreshes/s | status answers/s at the instance |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  if [ "${#orows[@]}" -gt 0 ]; then
    echo "Orders (wrk -t1 -c32) beside a storm (wrk -t1 -c64 polling); SPEC §8 after them: $verdict"
    echo
    echo "| run | orders/s | p99 ms | 503 | unanswered | storm answers/s |"
    echo "|---|---|---|---|---|---|"
    for r in "${orows[@]}"; do echo "| ${r//|/ | } |"; done
    echo
  fi
  echo "Medians of $rounds interleaved rounds:"
  echo
  if ! skipped a; then
    m_bare=$(median "${rates_bare:-}") m_status=$(median "${rates_status:-}") m_304=$(median "${rates_status304:-}")
    r=$(ratio "$m_status" "$m_bare")
    echo "- a: status / bare handler (-c64): $m_status / $m_bare = $r (target ≥ 0.8: $(meets "$r" 0.8)); per round: status${rates_status:-}, bare${rates_bare:-}"
    if [ -n "$etag" ]; then
      r=$(ratio "$m_304" "$m_bare")
      echo "- a: 304 / bare handler (-c64): $m_304 / $m_bare = $r; 304 / 200: $(ratio "$m_304" "$m_status") (target: above the 200s); per round: 304${rates_status304:-}"
    else
      echo "- a: 304: not measured (no ETag)"
    fi
  fi
  if ! skipped b; then
    echo "- b: Redis script calls/s on status (minus idle): per round${calls_status:-} at 64 pollers,${calls_status2000:-} at 2,000 (bound (1000 / refresh ms) × 1 SKU × 1 instance = $bound; refreshes/s in the table)"
  fi
  if ! skipped c; then
    m_os=$(median "${orders_beside_status:-}") m_ob=$(median "${orders_beside_bare:-}")
    r=$(ratio "$m_os" "$m_ob")
    echo "- c: orders/s beside the storm on status / beside the storm on the bare handler: $m_os / $m_ob = $r (target ≥ 0.8: $(meets "$r" 0.8)); alone $(median "${orders_alone:-}")/s; per round: beside status${orders_beside_status:-}, beside bare${orders_beside_bare:-}"
  fi
  if ! skipped d; then
    echo "- d: through nginx's cache: Redis script calls/s on status${calls_nginx16:-} at -c16 (${rates_nginx16:- ?} answers/s),${calls_nginx256:-} at -c256 (${rates_nginx256:- ?} answers/s); last $(cat "$tmp/xcache" 2>/dev/null)"
  fi
} | tee "$report" ${out:+"$out"}
echo "status.sh: report in $report" >&2
exit $failed
