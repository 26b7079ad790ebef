#!/usr/bin/env bash
# The event-loop core's targets (issue #11), measured side by side in one run, direct to one
# instance (no nginx): wrk -t2 -c64, 16 segments, quantity 1, default --threads unless said.
# Every order run is checked afterwards with loadtest/verify.sh (SPEC §8 from Redis).
#
#   bare      the bare libmicrohttpd handler (loadtest/bare_handler.c), the HTTP ceiling
#   atomic    --strategy atomic, hold 0
#   atomic, seg16 also for the older binary with --baseline (atomic_before, seg16_before)
#   seg1h2 / seg16h2   segmented, 1 and 16 segments, --hold-ms 2
#   c10k      10,000 open connections, --threads 2, 1 segment, hold 2 ms (RSS, answers), with the
#             default --max-connections and --connection-memory-kib (SPEC §9: the defaults);
#   c10k_2k   the same with --connection-memory-kib 2 (the setting for that many connections;
#             it serves request heads up to about 1 KiB, the default 24 KiB up to 8 KiB)
# The table goes to loadtest/results/<UTC stamp>-loopcore/REPORT.md (LT_RESULTS_DIR) and to
# --out FILE when given.
# Top-level Redis calls (EVALSHA + EVAL) and inner commands per created order come from INFO
# commandstats (CONFIG RESETSTAT before each run; the inner count is total commands processed
# minus the top-level ones).
#
# With --syscalls, perf stat counts inventoryd's system calls and context switches over each
# order run's window (not c10k): per answered request, in a second table (needs perf:
# scripts/deps.sh --bench; root or kernel.perf_event_paranoid <= -1 for the syscall tracepoints).
#
# Usage: loadtest/loopcore.sh [--baseline BIN] [--window S] [--skip-c10k] [--syscalls] [--out FILE]
#   --baseline BIN  an inventoryd built from an older commit: atomic and segmented vs before
#   --window S      seconds per run [6]
#   --out FILE      also write the table (markdown) to FILE
# Env: BUILD_DIR (build), INVENTORYD_BIN. Exit 0 all invariant checks passed, 1 one failed,
# 3 infrastructure (a server did not start, wrk missing).
set -uo pipefail
cd "$(dirname "$0")/.."
lt=loadtest
bin=${INVENTORYD_BIN:-${BUILD_DIR:-build}/bin/inventoryd}
baseline="" window=6 skip_c10k=0 syscalls=0 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) baseline=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --skip-c10k) skip_c10k=1; shift ;;
    --syscalls) syscalls=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--baseline BIN] [--window S] [--skip-c10k] [--syscalls] [--out FILE]" >&2; exit 2 ;;
  esac
done
for t in wrk redis-server redis-cli curl cc; do
  command -v "$t" >/dev/null || { echo "loopcore: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
[ -x "$bin" ] || { echo "loopcore: no $bin (build first)" >&2; exit 3; }
if [ "$syscalls" = 1 ]; then
  perf stat -e syscalls:sys_enter_epoll_ctl -- true >/dev/null 2>&1 \
    || { echo "loopcore: --syscalls needs perf and the syscall tracepoints (scripts/deps.sh --bench; root)" >&2; exit 3; }
fi
# The system calls counted one by one with --syscalls (all of them: raw_syscalls:sys_enter).
sc_events="epoll_ctl recvfrom sendmsg epoll_wait timerfd_settime write read"

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bare=${BUILD_DIR:-build}/bin/bare_handler
[ -x "$bare" ] || { echo "loopcore: no $bare (cmake --build ${BUILD_DIR:-build} --target bare_handler)" >&2; exit 3; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
rcli() { redis-cli -p "$rport" "$@"; }

wait_http() { for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; return 1; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }
stat_calls() { rcli info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\).*/\1/p"; }

failed=0
rows=()
sc_rows=()
# orders_hist PORT: "<requests ≤ 5 ms> <requests>" of the orders route so far, from the
# server's inventory_http_request_duration_seconds (first byte to answer queued)
orders_hist() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk '
    /^inventory_http_request_duration_seconds_bucket\{route="\/api\/v1\/orders"/ {
      if ($0 ~ /le="0.005"/) le5 = $NF
      if ($0 ~ /le="\+Inf"/) all = $NF
    }
    END { printf "%d %d", le5, all }'
}
# run NAME BINARY|bare SEGMENTS HOLD CONNS EXTRA_ARGS...
run() {
  local name=$1 b=$2 seg=$3 hold=$4 conns=$5; shift 5
  local port pid
  port=$(free_port)
  rcli flushall >/dev/null
  if [ "$b" = bare ]; then
    "$bare" "$port" 2 2>"$tmp/$name.log" &
  else
    ulimit -n 65536 2>/dev/null
    "$b" --port "$port" --bind 127.0.0.1 --redis "redis://127.0.0.1:$rport" --admin-token tok \
      --log-level warn --hold-ms "$hold" "$@" >"$tmp/$name.log" 2>&1 &
  fi
  pid=$!
  pids+=("$pid")
  wait_http "$port" || { echo "loopcore: $name did not start" >&2; cat "$tmp/$name.log" >&2; exit 3; }
  local script=order.lua ok=201
  if [ "$b" = bare ]; then
    script=ceiling.lua ok=2xx
  else
    curl -sf -X PUT -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' \
      -d "{\"stock\":1000000000,\"segments\":$seg}" "http://127.0.0.1:$port/api/v1/skus/lc" >/dev/null \
      || { echo "loopcore: PUT failed" >&2; exit 3; }
    # one order first, so the layout is cached before the counts start
    curl -sf -X POST -H 'Content-Type: application/json' -d '{"sku":"lc","quantity":1}' \
      "http://127.0.0.1:$port/api/v1/orders" >/dev/null
  fi
  rcli config resetstat >/dev/null
  local h0="" inside=-
  [ "$b" != bare ] && h0=$(orders_hist "$port")
  local perf_pid=""
  if [ "$syscalls" = 1 ] && [ "$b" != bare ] && [ "$conns" -le 1000 ]; then
    local ev="raw_syscalls:sys_enter,context-switches,task-clock" e
    for e in $sc_events; do ev+=",syscalls:sys_enter_$e"; done
    perf stat -x, -e "$ev" -p "$pid" -o "$tmp/$name.perf" -- sleep "$window" 2>/dev/null &
    perf_pid=$!
  fi
  local res
  res=$(cd $lt && ulimit -n 65536 2>/dev/null; LT_SKU=lc LT_OK=$ok LT_WINDOW_S=$window \
        wrk -t2 -c"$conns" -d"$((window + 3))s" --timeout 10s -s $script \
        "http://127.0.0.1:$port/api/v1/orders" 2>"$tmp/$name.wrk.err" | grep '^RESULT')
  echo "$name $res" >>"${LOOPCORE_RAW:-/dev/null}"
  if [ -n "$perf_pid" ]; then
    wait "$perf_pid"
    # per answered request: every system call, then each of sc_events, context switches, CPU µs
    local answered row
    answered=$(field answered "$res")
    row=$(awk -F, -v n="${answered:-0}" -v evs="all $sc_events" '
      $3 == "raw_syscalls:sys_enter" { v["all"] = $1 }
      $3 ~ /^syscalls:sys_enter_/ { e = $3; sub(/^syscalls:sys_enter_/, "", e); v[e] = $1 }
      $3 == "context-switches" { cs = $1 }
      $3 == "task-clock" { ms = $1 }
      END {
        if (n <= 0) exit
        k = split(evs, a, " "); out = ""
        for (i = 1; i <= k; i++) out = out sprintf("%.2f|", v[a[i]] / n)
        printf "%s%.3f|%.1f", out, cs / n, ms * 1000 / n
      }' "$tmp/$name.perf")
    [ -n "$row" ] && sc_rows+=("$name|$row")
  fi
  local rss=- top=- inner=- verdict=-
  if [ "$b" != bare ]; then
    # the share of the orders that took ≤ 5 ms inside the server: whether a p99 over 5 ms is
    # the server's or the machine's (docs/performance.md "Where the time goes")
    inside=$(echo "$h0 $(orders_hist "$port")" | awk '$4 > $2 {printf "%.2f", ($3 - $1) * 100 / ($4 - $2)}')
    rss=$(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
    local calls total created
    local evalsha eval_
    evalsha=$(stat_calls evalsha); eval_=$(stat_calls eval)
    calls=$(( ${evalsha:-0} + ${eval_:-0} ))
    total=$(rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed:\([0-9]*\)/\1/p')
    created=$(field created "$res")
    if [ "${created:-0}" -gt 0 ]; then
      top=$(awk -v c="$calls" -v n="$created" 'BEGIN {printf "%.2f", c / n}')
      inner=$(awk -v t="$total" -v c="$calls" -v n="$created" 'BEGIN {printf "%.1f", (t - c) / n}')
    fi
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ "$b" != bare ]; then
    # +1: the order placed before the counts started
    if $lt/verify.sh --redis-port "$rport" --sku lc --units "$(( $(field units "$res") + 1 ))" \
         --orders "$(( $(field created "$res") + 1 ))" --unanswered "$(( $(field unanswered "$res") + $(field s503_unknown "$res") ))" \
         --stock-total 1000000000 >"$tmp/$name.verify" 2>&1; then
      verdict=ok
      grep -v incomplete "$tmp/$name.log" | head -20 >>"${LOOPCORE_RAW:-/dev/null}"
    else
      verdict=VIOLATED; failed=1; tail -5 "$tmp/$name.verify" >&2
      cat "$tmp/$name.verify" >>"${LOOPCORE_RAW:-/dev/null}"
      grep -v incomplete "$tmp/$name.log" | head -20 >>"${LOOPCORE_RAW:-/dev/null}"
    fi
  fi
  local rate p99 s503
  rate=$(field rate "$res"); p99=$(field p99_us "$res"); s503=$(field s503 "$res")
  rows+=("$name|$rate|$p99|${inside:--}|$top|$inner|$(field created "$res")|$s503|$(field unanswered "$res")|$rss|$verdict")
  eval "rate_$name=${rate:-0}"
  eval "rss_$name=$rss"
  printf '%-10s rate=%s p99_us=%s calls/order=%s inner/order=%s 503=%s rss_mib=%s invariants=%s\n' \
    "$name" "$rate" "$p99" "$top" "$inner" "$s503" "$rss" "$verdict" >&2
}

only=${LOOPCORE_ONLY:-}
if [ -n "$only" ]; then run "$only" "$bin" 1 2 10000 --threads 2 --lock-wait-ms 2000 ${LOOPCORE_ARGS:-}; exit $failed; fi
run bare bare - 0 64
run atomic "$bin" 16 0 64 --strategy atomic
run seg16 "$bin" 16 0 64
[ -n "$baseline" ] && run atomic_before "$baseline" 16 0 64 --strategy atomic
[ -n "$baseline" ] && run seg16_before "$baseline" 16 0 64
run seg1h2 "$bin" 1 2 64
run seg16h2 "$bin" 16 2 64
if [ "$skip_c10k" = 1 ]; then :; else
  run c10k "$bin" 1 2 10000 --threads 2 --lock-wait-ms 2000
  run c10k_2k "$bin" 1 2 10000 --threads 2 --lock-wait-ms 2000 --connection-memory-kib 2
fi

report_dir=${LT_RESULTS_DIR:-$lt/results}/$(date -u +%Y%m%dT%H%M%SZ)-loopcore
mkdir -p "$report_dir"
report=$report_dir/REPORT.md
{
  echo "# loadtest/loopcore.sh — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Direct to one instance, wrk -t2 -c64 (c10k: -c10000), quantity 1; binary $bin${baseline:+, baseline $baseline};"
  echo "window ${window} s per run; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
} >"$report"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
  echo "| run | orders/s | p99 µs | % ≤ 5 ms inside the server | top-level calls/order | inner commands/order | created | 503 | unanswered | RSS MiB | SPEC §8 |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  echo "- atomic / bare handler: $(ratio "$rate_atomic" "$rate_bare") (target ≥ 0.5)"
  echo "- segmented / atomic (16 segments, hold 0): $(ratio "$rate_seg16" "$rate_atomic") (target ≥ 0.7)"
  [ -n "$baseline" ] && echo "- atomic / atomic before: $(ratio "$rate_atomic" "$rate_atomic_before")"
  [ -n "$baseline" ] && echo "- segmented / segmented before (16 segments, hold 0): $(ratio "$rate_seg16" "$rate_seg16_before")"
  echo "- 16 vs 1 segments at hold 2 ms: $(ratio "$rate_seg16h2" "$rate_seg1h2") (target ≥ 15)"
  [ "$skip_c10k" = 1 ] || echo "- RSS with 10,000 connections (VmHWM): ${rss_c10k:-?} MiB with the defaults, ${rss_c10k_2k:-?} MiB with --connection-memory-kib 2 (target ≤ 64 with the defaults)"
  if [ "${#sc_rows[@]}" -gt 0 ]; then
    echo
    echo "System calls of inventoryd per answered request over each run's window (perf stat -p; CPU = task-clock):"
    echo
    sep="|---|---|"
    for e in $sc_events; do sep+="---|"; done
    echo "| run | all | ${sc_events// / | } | context switches | CPU µs |"
    echo "$sep---|---|"
    for r in "${sc_rows[@]}"; do echo "| ${r//|/ | } |"; done
  fi
} | tee -a "$report" ${out:+"$out"}
echo "loopcore: report in $report" >&2
exit $failed
