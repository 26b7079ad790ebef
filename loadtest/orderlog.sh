#!/usr/bin/env bash
# What the order log (SPEC §12, issue 21) costs the order path, and whether inventory-sink keeps
# up with a full-speed sale. One instance, direct (no nginx), wrk -t2 -c64, quantity 1, 16
# segments, segmented, hold 0; one build, one run:
#
#   off / on    inventoryd without and with --order-log, alternated (off on off on ...) so drift
#               of the machine's load hits both; no sink running. Per run: orders/s, p99, top-level
#               Redis calls per order (EVALSHA + EVAL), XADD and XLEN per order and Redis's CPU
#               per order (INFO cpu, user + sys), Redis's µs per EVALSHA, XADD and XLEN (INFO
#               commandstats usec_per_call) — all from CONFIG RESETSTAT before the run —
#               and inventoryd's CPU per order (/proc/PID/stat); Redis is FLUSHALLed before each;
#   sale_sink   --order-log with one inventory-sink running into a private MariaDB (its own
#               datadir, innodb_flush_log_at_trx_commit=1, --batch 500): orders/s, the sink's
#               events/s into MariaDB during the sale (inventory_sink_events_written_total over
#               the window) and after it (the catch-up: the backlog left at the end over the time
#               until the sink has written every entry), the lag (inventory_sink_lag_seconds,
#               sampled every second) during the sale, and `inventory-sink reconcile` at the end;
#   backlog     --order-log, the sink started only once the sale is over: how fast it drains the
#               whole sale's backlog (from its first written entry to the last), with nothing
#               else running; reconcile at the end.
#
# Usage: loadtest/orderlog.sh [--window S] [--pairs N] [--out FILE]
#   --window S  seconds per run [8];  --pairs N  off/on pairs [3];  --out FILE  also the table
# Env: BUILD_DIR (build). Exit 0, 1 when reconcile found a difference, 3 infrastructure.
# Not a test (scripts/test.sh does not run it): numbers for docs/performance.md, "The order log".
set -uo pipefail
cd "$(dirname "$0")/.."
lt=loadtest
bdir=${BUILD_DIR:-build}
bin=$bdir/bin/inventoryd
sink=$bdir/bin/inventory-sink
window=8 pairs=3 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --window) window=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--window S] [--pairs N] [--out FILE]" >&2; exit 2 ;;
  esac
done
for t in wrk redis-server redis-cli curl mariadb mariadb-install-db python3; do
  command -v "$t" >/dev/null || { echo "orderlog: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
[ -x "$bin" ] && [ -x "$sink" ] || { echo "orderlog: no $bin or $sink (build first)" >&2; exit 3; }

tmp=$(mktemp -d /tmp/inventoryd-orderlog.XXXXXX)
pids=()
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "orderlog: $*" >&2; exit 3; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; return 1; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
rcli() { redis-cli -p "$rport" "$@"; }
stat_calls() { rcli info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\).*/\1/p"; }
# stat_usec CMD: Redis's µs per call of CMD (for EVALSHA: the whole script, the calls inside it
# included; a call from a script counts in its own command's line too)
stat_usec() { rcli info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"; }
redis_cpu() { rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'; }

# The database: as scripts/run.sh --with-db (and the tests' fixture) makes it.
dport=$(free_port)
as_root=()
[ "$(id -u)" != 0 ] || as_root=(--user=root)
mariadb-install-db --no-defaults --datadir="$tmp/db" --auth-root-authentication-method=normal \
  --skip-test-db ${as_root[@]+"${as_root[@]}"} >"$tmp/db-install.log" 2>&1 || die "mariadb-install-db failed"
"$mariadbd" --no-defaults --datadir="$tmp/db" --bind-address=127.0.0.1 --port="$dport" \
  --socket="$tmp/db.sock" --log-error="$tmp/db-error.log" --pid-file="$tmp/db.pid" \
  --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=1 --skip-name-resolve \
  ${as_root[@]+"${as_root[@]}"} &
pids+=($!)
sql() { mariadb --no-defaults --socket="$tmp/db.sock" -uroot "$@"; }
for _ in $(seq 300); do sql -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
sql -e "CREATE DATABASE shop; CREATE USER 'sink'@'127.0.0.1' IDENTIFIED BY 'bench';
        GRANT SELECT, INSERT, UPDATE, CREATE ON shop.* TO 'sink'@'127.0.0.1';" || die "MariaDB did not start"
db_url="mysql://sink:bench@127.0.0.1:$dport/shop"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
n=0
# run NAME LOG(0|1) SINK(0|during|after): one sale on a fresh SKU; sums the rates per NAME.
run() {
  local name=$1 log=$2 with_sink=$3
  n=$((n + 1))
  local sku=ol$n port pid spid="" mport=""
  port=$(free_port)
  rcli flushall >/dev/null # no stream of an earlier run for the sink to drain
  local args=(--port "$port" --bind 127.0.0.1 --redis "redis://127.0.0.1:$rport" --admin-token tok
              --log-level warn --max-connections 20000)
  [ "$log" = 1 ] && args+=(--order-log)
  "$bin" "${args[@]}" >"$tmp/$name-$n.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_http "$port" || { cat "$tmp/$name-$n.log" >&2; die "$name: inventoryd did not start"; }
  curl -sf -X PUT -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' \
    -d '{"stock":1000000000,"segments":16}' "http://127.0.0.1:$port/api/v1/skus/$sku" >/dev/null ||
    die "PUT failed"
  curl -sf -X POST -H 'Content-Type: application/json' -d "{\"sku\":\"$sku\",\"quantity\":1}" \
    "http://127.0.0.1:$port/api/v1/orders" >/dev/null
  if [ "$with_sink" = during ]; then
    start_sink
    # until it has found the SKU's streams and written the first order
    for _ in $(seq 100); do
      [ "$(written)" -ge 1 ] 2>/dev/null && break
      sleep 0.1
    done
  fi
  rcli config resetstat >/dev/null
  local cpu0 w0=0 res icpu0
  cpu0=$(redis_cpu); icpu0=$(proc_cpu "$pid")
  [ -n "$mport" ] && w0=$(written)
  (cd $lt && LT_SKU=$sku LT_OK=201 LT_WINDOW_S=$window wrk -t2 -c64 -d"$((window + 3))s" \
     --timeout 10s -s order.lua "http://127.0.0.1:$port/api/v1/orders" 2>"$tmp/$name-$n.wrk.err" |
     grep '^RESULT' >"$tmp/$name-$n.res") &
  local wpid=$! t0 lag_max=0 w1="" t_end="" w_last="" t_last=""
  t0=$(date +%s.%N)
  if [ -n "$mport" ]; then
    # while the sale runs: the lag every second (also during wrk's drain) and the written count
    # when the window closes; after it, every 0.1 s, when the written count last moved
    local next_lag=$t0 now w l
    while kill -0 "$wpid" 2>/dev/null; do
      now=$(date +%s.%N)
      if awk -v a="$now" -v b="$next_lag" 'BEGIN { exit !(a >= b) }'; then
        l=$(sink_metric "$mport" inventory_sink_lag_seconds)
        lag_max=$(awk -v a="$lag_max" -v b="${l:-0}" 'BEGIN { print (b > a) ? b : a }')
        next_lag=$(awk -v a="$next_lag" 'BEGIN { printf "%.3f", a + 1 }')
      fi
      if [ -z "$w1" ]; then
        if awk -v t0="$t0" -v now="$now" -v w="$window" 'BEGIN { exit !(now - t0 >= w) }'; then
          w1=$(written); t_end=$now; w_last=$w1; t_last=$now
        fi
      else
        w=$(written)
        [ "$w" = "$w_last" ] || { w_last=$w; t_last=$(date +%s.%N); }
      fi
      sleep 0.1
    done
  fi
  wait "$wpid"
  res=$(cat "$tmp/$name-$n.res")
  local cpu1 icpu1 calls xadd xlen created rate p99
  cpu1=$(redis_cpu); icpu1=$(proc_cpu "$pid")
  local es ev
  es=$(stat_calls evalsha); ev=$(stat_calls eval)
  calls=$(( ${es:-0} + ${ev:-0} ))
  xadd=$(stat_calls xadd); xlen=$(stat_calls xlen)
  local us_eval us_xadd us_xlen
  us_eval=$(stat_usec evalsha); us_xadd=$(stat_usec xadd); us_xlen=$(stat_usec xlen)
  created=$(field created "$res"); rate=$(field rate "$res"); p99=$(field p99_us "$res")
  [ "${created:-0}" -gt 0 ] || die "$name: no order created ($res)"
  local per=$(awk -v c="$calls" -v n="$created" 'BEGIN { printf "%.2f", c / n }')
  local xa=$(awk -v c="${xadd:-0}" -v n="$created" 'BEGIN { printf "%.2f", c / n }')
  local xl=$(awk -v c="${xlen:-0}" -v n="$created" 'BEGIN { printf "%.2f", c / n }')
  local cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$created" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }')
  local icpu_us=$(awk -v a="$icpu0" -v b="$icpu1" -v n="$created" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }')
  local sink_cols="-|-|-|-|-"
  local total=$((created + 1)) # every entry: the orders and the one before the counts
  if [ "$with_sink" = after ]; then
    # the backlog of the whole sale, drained by a sink started now: from its first written
    # entry (it finds the streams within a second) to the last
    start_sink
    w1=0
    for _ in $(seq 600); do [ "$(written)" -ge 1 ] 2>/dev/null && break; sleep 0.05; done
    t_end=$(date +%s.%N); w1=$(written); w_last=$w1; t_last=$t_end
  fi
  if [ -n "$mport" ]; then
    # the catch-up: until every entry is in, noting when the written count last moved
    local w t_now during after
    for _ in $(seq 3000); do
      w=$(written)
      [ "$w" = "$w_last" ] || { w_last=$w; t_last=$(date +%s.%N); }
      [ "$w" -ge "$total" ] && break
      sleep 0.1
    done
    local w_end=$w_last
    if [ "$with_sink" = during ]; then
      during=$(awk -v a="$w0" -v b="$w1" -v w="$window" 'BEGIN { printf "%.0f", (b - a) / w }')
    else
      during="- (stopped)"
    fi
    after=$(awk -v a="$w1" -v b="$w_end" -v t="$t_end" -v u="$t_last" \
      'BEGIN { if (u - t > 0.05) printf "%.0f", (b - a) / (u - t); else print "-" }')
    local backlog=$((w_end - w1)) catch
    catch=$(awk -v t="$t_end" -v u="$t_last" 'BEGIN { printf "%.2f", u - t }')
    [ "$with_sink" = after ] && lag_max="-"
    local rec=ok
    "$sink" reconcile --redis "redis://127.0.0.1:$rport" --db "$db_url" --sku "$sku" \
      >"$tmp/reconcile.out" 2>&1 || { rec=DIFFERS; head -5 "$tmp/reconcile.out" >&2; reconcile_failed=1; }
    sink_cols="$during|$backlog in ${catch} s = $after/s|$lag_max|$w_end of $total|$rec"
    kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  fi
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  rows+=("$name|$rate|$(awk -v p="$p99" 'BEGIN { printf "%.1f", p / 1000 }')|$per|$xa|$xl|$cpu_us|${us_eval:--}|${us_xadd:--}|${us_xlen:--}|$icpu_us|$sink_cols")
  eval "sum_rate_$name=\$(awk -v a=\"\${sum_rate_$name:-0}\" -v b=\"$rate\" 'BEGIN { print a + b }')"
  eval "cnt_$name=\$(( \${cnt_$name:-0} + 1 ))"
  printf '%-9s rate=%s p99_us=%s calls/order=%s xadd=%s xlen=%s redis_cpu_us/order=%s evalsha_us=%s xadd_us=%s xlen_us=%s inventoryd_cpu_us/order=%s sink=%s\n' \
    "$name" "$rate" "$p99" "$per" "$xa" "$xl" "$cpu_us" "$us_eval" "$us_xadd" "$us_xlen" "$icpu_us" "$sink_cols" >&2
}
# proc_cpu PID: the process's user + system CPU in seconds
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }
written() { sink_metric "$mport" inventory_sink_events_written_total; }
# start_sink: one inventory-sink (consumer "bench") on a free metrics port, in $mport / $spid
start_sink() {
  mport=$(free_port)
  "$sink" --redis "redis://127.0.0.1:$rport" --db "$db_url" --metrics-port "$mport" \
    --consumer bench --log-level warn 2>"$tmp/sink-$n.log" &
  spid=$!
  pids+=("$spid")
  wait_http "$mport" || { cat "$tmp/sink-$n.log" >&2; die "the sink did not start"; }
}
sink_metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { printf "%d", $2 }'; }

reconcile_failed=0
for ((i = 0; i < pairs; i++)); do
  run off 0 0
  run on 1 0
done
run sale_sink 1 during
run backlog 1 after

avg() { eval "awk -v s=\"\${sum_rate_$1:-0}\" -v c=\"\${cnt_$1:-1}\" 'BEGIN { printf \"%.0f\", s / c }'"; }
{
  echo "# loadtest/orderlog.sh — $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  echo "Direct to one instance, wrk -t2 -c64, segmented, 16 segments, hold 0, quantity 1; window ${window} s;"
  echo "$(nproc) cores; load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| run | orders/s | p99 ms | Redis calls/order | XADD/order | XLEN/order | Redis CPU µs/order | EVALSHA µs | XADD µs | XLEN µs | inventoryd CPU µs/order | sink events/s during | catch-up after | max lag s | written | reconcile |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  echo "- orders/s with --order-log / without (mean of $pairs alternated runs each): $(avg on) / $(avg off) = $(awk -v a="$(avg on)" -v b="$(avg off)" 'BEGIN { printf "%.2f", a / b }') (target ≥ 0.9)"
} | tee ${out:+"$out"}
exit $reconcile_failed
