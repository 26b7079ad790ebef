#!/usr/bin/env bash
# SPEC §9 against what teams build instead, in one run on this machine: inventoryd beside the
# seeds' algorithm in Go, Node and OpenResty and OpenResty's lockless one-script decrement
# (loadtest/peers/), and the bare libmicrohttpd handler (loadtest/bare_handler.c) as the HTTP
# ceiling. Every service direct (no nginx in front), one at a time, on one redis-server flushed
# before each: wrk -t2 -c64, one SKU, the same stock and segments, quantity 1, order.lua (the
# peers answer inventoryd's POST /api/v1/orders, so the same wrk script drives all).
#
#   bare        the bare handler (ceiling.lua: any 2xx)
#   atomic      inventoryd --strategy atomic, hold 0
#   segmented   inventoryd (segmented, the default), hold 0
#   go          net/http + redigo                      \
#   node        fastify + ioredis + redlock             } the seeds' algorithm (a Redis lock per
#   openresty   nginx + Lua cosockets                  /  segment, SET NX PX + compare-and-delete)
#   lockless    nginx + Lua, one EVALSHA per order (check + DECRBY + order record), no lock
#
# Each order run is checked afterwards: inventoryd with loadtest/verify.sh (SPEC §8), the peers
# with peer_verify (loadtest/peers/lib.sh: no segment below 0, the units gone = the units of the
# order records = the units of the 201 answers wrk counted). Then, unless --no-sellout, each
# order service sells a small stock out under the same load (SELLOUT units; every segment must
# end at 0, every unit in exactly one 201 and one record, the rest 409).
# Prints orders/s, p99, the server's CPU per answer (user + system of its processes during the
# window, over the answers) and Redis's (INFO cpu), then the SPEC §9 ratios, also of CPU per
# answer (server + Redis: what decides orders/s on a machine whose cores are all busy); writes REPORT.md and the raw
# RESULT/VERIFY lines under loadtest/results/<UTC stamp>-peers/ (LT_RESULTS_DIR).
#
# Usage: loadtest/peers.sh [--window S] [--segments N] [--conns C] [--only a,b,...] [--no-sellout]
#                          [--no-deps] [--out FILE]
#   --window S     seconds of each throughput window [10]
#   --segments N   segments of the SKU, for every service [16]
#   --conns C      wrk connections [64]
#   --only LIST    a subset of bare,atomic,segmented,go,node,openresty,lockless
#   --no-sellout   skip the sell-out runs
#   --no-deps      do not run scripts/deps.sh --peers first (it installs the peers' packages)
#   --out FILE     also write the table (markdown) to FILE
# Env: BUILD_DIR (build), INVENTORYD_BIN, STOCK (1000000000), SELLOUT (5000), LT_RESULTS_DIR.
# Exit 0 every check passed, 1 a check failed, 3 infrastructure (a server did not start).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest
lib_name=peers
window=10 segments=16 conns=64 only="" sellout_on=1 deps=1 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --window) window=$2; shift 2 ;;
    --segments) segments=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --only) only=",$2,"; shift 2 ;;
    --no-sellout) sellout_on=0; shift ;;
    --no-deps) deps=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--window S] [--segments N] [--conns C] [--only LIST] [--no-sellout] [--no-deps] [--out FILE]" >&2
       exit 2 ;;
  esac
done
stock=${STOCK:-1000000000}
sellout=${SELLOUT:-5000}
build_dir=${BUILD_DIR:-$root/build}
bin=${INVENTORYD_BIN:-$build_dir/bin/inventoryd}
bare_bin=$build_dir/bin/bare_handler
res=${LT_RESULTS_DIR:-$lt/results}/$(date -u +%Y%m%dT%H%M%SZ)-peers
run_dir=$res/run
mkdir -p "$res/logs" "$run_dir"
port_min=20000 port_max=32000 instances=1 lock_wait=2000 wrk_threads=2 drain_max=5
# shellcheck source=loadtest/lib.sh
source "$lt/lib.sh"
# shellcheck source=loadtest/peers/lib.sh
source "$lt/peers/lib.sh"
install_cleanup

if [ "$deps" = 1 ]; then
  "$root/scripts/deps.sh" --peers >>"$res/logs/deps.log" 2>&1 || die "scripts/deps.sh --peers failed (see $res/logs/deps.log)"
fi
check_tools
command -v wrk >/dev/null || die "wrk is missing"
build_targets inventoryd bare_handler
peers_build "$run_dir/bin" 2>>"$res/logs/peers-build.log" || die "the peers do not build (see $res/logs/peers-build.log)"
ulimit -n 65536 2>/dev/null || true
start_redis
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average before: $load_before; window ${window} s, ${segments} segments, wrk -t2 -c${conns}"

wanted() { [ -z "$only" ] || [[ $only == *",$1,"* ]]; }

# cpu_ticks PID: user + system clock ticks of PID and of its children that are alive (nginx's
# workers), as the kernel counts them now.
cpu_ticks() {
  local p t=0 c
  for p in "$1" $(cat "/proc/$1/task/"*/children 2>/dev/null); do
    c=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || continue
    t=$((t + ${c:-0}))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
# redis_cpu: Redis's own CPU so far (used_cpu_user + used_cpu_sys of INFO cpu), in seconds.
redis_cpu() {
  rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { t += $2 } END { printf "%.6f", t }'
}

# start_service NAME PORT: starts service NAME on PORT with an empty Redis; sets $svc_pid and
# $svc_url (where wrk posts). Dies when it does not answer within 15 s.
start_service() {
  local name=$1 port=$2 ready
  rcli flushall >/dev/null
  case $name in
    bare)
      "$bare_bin" "$port" 2 2>>"$res/logs/bare.log" &
      svc_pid=$!
      ;;
    atomic | segmented)
      local extra=()
      [ "$name" = atomic ] && extra=(--strategy atomic)
      "$bin" --port "$port" --bind 127.0.0.1 --redis "redis://127.0.0.1:$redis_port" \
        --lock-wait-ms "$lock_wait" --log-level warn --hold-ms 0 --max-connections 20000 \
        --admin-allow-loopback "${extra[@]}" 2>>"$res/logs/$name.log" &
      svc_pid=$!
      ;;
    *)
      peer_launch "$name" "$port" "$redis_port" "$segments" "$run_dir/$name" "$res/logs/$name.log"
      svc_pid=$peer_pid
      ;;
  esac
  extra_pids+=("$svc_pid")
  ready=/healthz
  case $name in atomic | segmented) ready=/readyz ;; esac
  wait_ready "$svc_pid" 150 curl -fsS --max-time 1 "http://127.0.0.1:$port$ready" ||
    die "$name did not start on port $port (see $res/logs/$name.log)"
  svc_url=http://127.0.0.1:$port/api/v1/orders
}

# preheat NAME PORT SKU STOCK: the SKU with STOCK units in $segments segments, and one order
# placed before the counts start (inventoryd caches the layout, the peers open their Redis
# connections); verify adds that order.
preheat() {
  local name=$1 port=$2 s=$3 st=$4
  case $name in
    bare) return 0 ;;
    atomic | segmented)
      curl -fsS --max-time 10 -X PUT -H 'Content-Type: application/json' \
        -d "{\"stock\": $st, \"segments\": $segments}" "http://127.0.0.1:$port/api/v1/skus/$s" \
        >/dev/null 2>>"$res/logs/curl.log" || die "PUT of $s on $name failed"
      ;;
    *) peer_preheat "$redis_port" "$s" "$st" "$segments" || die "preheat of $s for $name failed" ;;
  esac
  curl -fsS --max-time 10 -X POST -H 'Content-Type: application/json' \
    -d "{\"sku\":\"$s\",\"quantity\":1}" "$svc_url" >/dev/null 2>>"$res/logs/curl.log" ||
    die "the first order of $s on $name failed"
}

# check NAME SKU STOCK RESULT [--expect-sold-out]: the invariants after a run; prints the VERIFY
# line; 1 when one fails.
check() {
  local name=$1 s=$2 st=$3 r=$4 sold_out=${5:-}
  local created units unanswered
  created=$(($(field created "$r") + 1)) units=$(($(field units "$r") + 1))
  unanswered=$(($(field unanswered "$r") + $(field s503_unknown "$r")))
  case $name in
    atomic | segmented)
      "$lt/verify.sh" --redis-port "$redis_port" --sku "$s" --units "$units" --orders "$created" \
        --unanswered "$unanswered" --stock-total "$st" ${sold_out:+"$sold_out"} >"$res/logs/$name.$s.verify" 2>&1
      local rc=$?
      grep '^VERIFY' "$res/logs/$name.$s.verify" | tail -1
      return $rc
      ;;
    *)
      local line rc=0
      line=$(peer_verify "$redis_port" "$s" "$st" "$segments" "$created" "$units" "$unanswered") || rc=1
      echo "$line"
      if [ -n "$sold_out" ] && [ "$(field remaining "$line")" != 0 ]; then
        echo "NOT SOLD OUT within the window: $(field remaining "$line") units left"
        rc=1
      fi
      return $rc
      ;;
  esac
}

declare -A o=([conns]=$conns [script]=order.lua [ok]=201)
failed=0
rows=()
declare -A rate p99 cpu rcpu
# run NAME: the throughput window of service NAME.
run() {
  local name=$1 port t0 t1 r0 r1 answered verdict=- v="" load1
  load1=$(cut -d' ' -f1 /proc/loadavg)
  pick_port || die "no free port"; port=$picked
  start_service "$name" "$port"
  sku=peers qty=1
  preheat "$name" "$port" "$sku" "$stock"
  o[script]=order.lua o[ok]=201
  [ "$name" = bare ] && o[script]=ceiling.lua o[ok]=2xx
  url=$svc_url
  t0=$(cpu_ticks "$svc_pid") r0=$(redis_cpu)
  start_wrk "$res/$name" "$window"
  finish_wrk "$res/$name"
  t1=$(cpu_ticks "$svc_pid") r1=$(redis_cpu)
  echo "$name $result" >>"$res/results.txt"
  answered=$(field answered "$result")
  cpu[$name]=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="$answered" \
    'BEGIN { if (n > 0) printf "%.0f", d / hz * 1e6 / n; else print "-" }')
  rcpu[$name]=$(awk -v a="$r0" -v b="$r1" -v n="$answered" \
    'BEGIN { if (n > 0) printf "%.1f", (b - a) * 1e6 / n; else print "-" }')
  if [ "$name" != bare ]; then
    if v=$(check "$name" "$sku" "$stock" "$result"); then verdict=ok; else verdict=VIOLATED; failed=1; fi
    echo "$name $v" >>"$res/results.txt"
  fi
  rate[$name]=$(field rate "$result") p99[$name]=$(field p99_us "$result")
  local created
  created=$(field created "$result")
  local so=-
  if [ "$sellout_on" = 1 ] && [ "$name" != bare ]; then
    sku=sellout
    preheat "$name" "$port" "$sku" "$sellout"
    # long enough to sell it all at half the rate just measured (at least 4 s)
    local sw
    sw=$(awk -v r="${rate[$name]:-0}" -v n="$sellout" 'BEGIN { w = (r > 0) ? int(2 * n / r) + 2 : 30
      if (w < 4) w = 4; if (w > 60) w = 60; print w }')
    start_wrk "$res/$name.sellout" "$sw"
    finish_wrk "$res/$name.sellout"
    echo "$name.sellout $result" >>"$res/results.txt"
    # the first order (preheat) is one of the 201s
    so="$(($(field created "$result") + 1)) × 201, $(field s409 "$result") × 409, $(field s503 "$result") × 503"
    if v=$(check "$name" "$sku" "$sellout" "$result" --expect-sold-out); then so="ok: $so"
    else
      case $v in *"NOT SOLD OUT"*) so="NOT SOLD OUT: $so" ;; *) so="VIOLATED: $so" ;; esac
      failed=1
    fi
    echo "$name.sellout $v" >>"$res/results.txt"
  fi
  stop_pid "$svc_pid" 50
  rows+=("$name|${rate[$name]}|${p99[$name]}|${cpu[$name]}|${rcpu[$name]}|$created|$verdict|$so|$load1")
  log "$name: orders/s=${rate[$name]} p99_us=${p99[$name]} cpu_us/answer=${cpu[$name]} redis_cpu_us/answer=${rcpu[$name]} invariants=$verdict sellout=$so"
}

for n in bare atomic segmented go node openresty lockless; do
  wanted "$n" && run "$n"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

ratio() {
  awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "-" }'
}
# tcpu NAME: server + Redis CPU µs per answer of NAME.
tcpu() { awk -v a="${cpu[$1]:-0}" -v b="${rcpu[$1]:-0}" 'BEGIN { printf "%.1f", a + b }'; }
# line TEXT A B TARGET: the ratio of orders/s of A and B, and the same by CPU per answer.
line() {
  echo "- $1: $(ratio "${rate[$2]:-}" "${rate[$3]:-}") (target ≥ $4); by CPU per answer (server + Redis): $(ratio "$(tcpu "$3")" "$(tcpu "$2")")"
}
report=$res/REPORT.md
{
  echo "# loadtest/peers.sh — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Direct to one server each, wrk -t2 -c${conns}, ${window} s windows, one SKU of ${stock} units in"
  echo "${segments} segments, quantity 1, one redis-server; load average before: ${load_before}, after: ${load_after}"
  echo "($(nproc) cores)."
  echo
  echo "| service | orders/s | p99 µs | server CPU µs/answer | Redis CPU µs/answer | 201 | invariants | sell-out of ${sellout} | load (1 min) at its start |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  line "segmented ÷ Go" segmented go 5
  line "segmented ÷ Node" segmented node 5
  line "segmented ÷ OpenResty" segmented openresty 5
  line "atomic ÷ OpenResty's lockless script" atomic lockless 1.5
  line "atomic ÷ bare handler" atomic bare 0.5
  line "segmented ÷ atomic" segmented atomic 0.7
  echo "- segmented p99: ${p99[segmented]:--} µs (target ≤ 5000)"
} >"$report"
cat "$report"
[ -z "$out" ] || cp "$report" "$out"
log "report in $report"
exit $failed
