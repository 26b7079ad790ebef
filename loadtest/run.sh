#!/usr/bin/env bash
# The benchmark: starts a private redis-server, K inventoryd instances and nginx as their load
# balancer (config/nginx-lb.conf.template), preheats SKUs, drives them with wrk and the Lua
# scripts of loadtest/, and after every run checks the SPEC §8 invariants (loadtest/verify.sh:
# wrk's own count of 201 units against Redis read directly, plus the status endpoint). Writes
# loadtest/results/<UTC timestamp>/ with the raw wrk output, runs.tsv, REPORT.md (tables, SPEC §9
# ratios with "meets"/"falls short") and gnuplot PNGs. Everything it starts is stopped on exit.
#
# Usage: loadtest/run.sh [--quick] [--scenarios LIST] [--out DIR] [--profile|--no-profile]
#   --quick       < 2 min: 3 s windows, segments 1 and 16, fewer runs (scripts/test.sh runs this)
#   --scenarios   comma-separated subset of: a (segment sweep), b (strategies), c (sell-out + 409
#                 flood), d (mixed 90/10), e (ceilings: bare MHD handler, nginx 204, direct),
#                 f (RSS under 256 connections), m (MONITOR calibration of commands per order),
#                 p (perf profiles of segmented and atomic; full runs only, when perf
#                 works)                                                        [all]
#   --out DIR     results directory [loadtest/results/<UTC timestamp>]
# Exit status: 0 all runs passed their invariant checks (performance ratios are printed, never
# asserted); 1 an invariant was violated; 2 usage; 3 infrastructure failure (a process did not
# start, wrk failed, Redis unreadable).
#
# Env (all optional):
#   BUILD_DIR (build)            cmake build dir; INVENTORYD_BIN overrides the binary
#   LT_SKIP_BUILD=1              use the existing binaries; LT_SKIP_DEPS=1 skips scripts/deps.sh
#   LT_INSTANCES (3)             inventoryd instances behind nginx
#   LT_REDIS_PORT, LT_NGINX_PORT, LT_BASE_PORT (instance i listens on base+i)  [free ports]
#   LT_PORT_MIN, LT_PORT_MAX     range free ports are drawn from [20000, 32000]
#   LT_WINDOW_S (10; quick 3)    measured seconds per run
#   LT_WARMUP_S (1)              a warm-up wrk run before each measured one (0: none); its
#                                orders count for the invariants, not for rates or latencies
#   LT_CONNECTIONS (64)          wrk connections; LT_WRK_THREADS (2)
#   LT_THREADS_HOLD0 (2)         --threads per instance for --hold-ms 0 runs (the default:
#                                one per CPU; 4 and 8 measured slower on 2 cores)
#   LT_THREADS_HOLD2 (2)         --threads per instance for --hold-ms > 0 runs (the default:
#                                a lock wait parks no thread since the event-loop core; 8 was
#                                the thread pool's best)
#   LT_LOCK_WAIT_MS (2000)       --lock-wait-ms
#   LT_STOCK (1000000000)        units per SKU in the order scenarios (never sells out)
#   LT_SELLOUT_STOCK (20000; quick 3000)  units of the sell-out scenario
#   LT_QTY (1)                   quantity per order
#   LT_SEGMENTS ("1 2 4 8 16 32 64"; quick "1 16")  sweep points; LT_HOLDS ("0 2")
#   LT_STRATEGY_SEGMENTS (16)    segments of the strategy comparison
#   LT_RSS_CONNECTIONS (256)     connections of the RSS run (direct to one instance)
#   LT_INVENTORYD_ARGS           extra inventoryd flags for every instance, e.g.
#                                "--redis-replica-acks 0" (word-split)
#   LT_QUIET_WAIT_S (30; quick 0) before each run, wait up to this long for other processes on
#                                the machine to use < 15 % CPU (the load seen is reported)
#   LT_RETRIES (1; quick 0)      a run during which more than LT_DISTURBED_PCT (15) % of the
#                                machine's CPU went to processes outside the benchmark is
#                                measured again, at most this many times (never a run whose
#                                invariants failed)
#   LT_RESULTS_DIR (loadtest/results)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest

quick=0 scenarios="" out="" profile=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --scenarios=*) scenarios=${1#*=}; shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --profile) profile=1; shift ;;
    --no-profile) profile=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$scenarios" ]; then
  scenarios=a,b,c,d,e,f,m,p
fi
has() { [[ ",$scenarios," == *",$1,"* ]]; }

build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=${INVENTORYD_BIN:-$build_dir/bin/inventoryd}
instances=${LT_INSTANCES:-3}
port_min=${LT_PORT_MIN:-20000}
port_max=${LT_PORT_MAX:-32000}
conns=${LT_CONNECTIONS:-64}
wrk_threads=${LT_WRK_THREADS:-2}
threads_h0=${LT_THREADS_HOLD0:-2}
threads_h2=${LT_THREADS_HOLD2:-2}
lock_wait=${LT_LOCK_WAIT_MS:-2000}
stock=${LT_STOCK:-1000000000}
warmup=${LT_WARMUP_S:-1}
quiet_wait=${LT_QUIET_WAIT_S:-}
disturbed_pct=${LT_DISTURBED_PCT:-15}
retries=${LT_RETRIES:-}
qty=${LT_QTY:-1}
strategy_segments=${LT_STRATEGY_SEGMENTS:-16}
rss_conns=${LT_RSS_CONNECTIONS:-256}
holds=${LT_HOLDS:-0 2}
if [ "$quick" = 1 ]; then
  window=${LT_WINDOW_S:-3}
  sweep=${LT_SEGMENTS:-1 16}
  sellout_stock=${LT_SELLOUT_STOCK:-3000}
  quiet_wait=${quiet_wait:-0}
  retries=${retries:-0}
  [ "$profile" = 1 ] || profile=0
else
  window=${LT_WINDOW_S:-10}
  sweep=${LT_SEGMENTS:-1 2 4 8 16 32 64}
  sellout_stock=${LT_SELLOUT_STOCK:-20000}
  quiet_wait=${quiet_wait:-30}
  retries=${retries:-1}
fi
has p || profile=0
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results_root=${LT_RESULTS_DIR:-$lt/results}
res=${out:-$results_root/$stamp$([ "$quick" = 1 ] && echo -quick || true)}
mkdir -p "$res/raw" "$res/logs"
run_dir=$res/run # pid files, nginx config and temp files
mkdir -p "$run_dir"
tsv=$res/runs.tsv
cat >"$res/params.env" <<EOF
mode=$([ "$quick" = 1 ] && echo quick || echo full)
instances=$instances
window=$window
warmup=$warmup
conns=$conns
wrk_threads=$wrk_threads
threads_h0=$threads_h0
threads_h2=$threads_h2
lock_wait=$lock_wait
stock=$stock
sellout_stock=$sellout_stock
qty=$qty
sweep=$sweep
holds=$holds
strategy_segments=$strategy_segments
rss_conns=$rss_conns
inventoryd_args=${LT_INVENTORYD_ARGS:-}
git_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- service/src lockcore/src lockcore/include 2>/dev/null || echo " + uncommitted changes in service/src or lockcore/")
EOF
lib_name=loadtest
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

mon_pid="" perf_pid="" perf_pid2=""
perf_stat_pids=()
cleanup_hook() {
  [ -n "$mon_pid" ] && stop_pid "$mon_pid" 10
  [ -n "$perf_pid" ] && stop_pid "$perf_pid" 30
  [ -n "$perf_pid2" ] && stop_pid "$perf_pid2" 30
  for p in ${perf_stat_pids[@]+"${perf_stat_pids[@]}"}; do stop_pid "$p" 10; done
}
install_cleanup

# --- set-up -----------------------------------------------------------------------------------

[ "${LT_SKIP_DEPS:-0}" = 1 ] || "$root/scripts/deps.sh"
check_tools
if [ "${LT_SKIP_BUILD:-0}" != 1 ]; then
  # With INVENTORYD_BIN given, only the ceiling is built here.
  if [ -z "${INVENTORYD_BIN:-}" ]; then build_targets inventoryd bare_handler; else build_targets bare_handler; fi
fi
[ -x "$bin" ] || die "no inventoryd binary at $bin"
bare_bin=$build_dir/bin/bare_handler
[ -x "$bare_bin" ] || die "no bare_handler at $bare_bin (cmake --build $build_dir --target bare_handler)"
pick_instance_ports

# --- measurements -----------------------------------------------------------------------------

# Prints "name calls" for every command in INFO commandstats.
cmdstats() { rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p'; }
# CPU ticks (utime + stime) of a pid and its threads; 0 when gone.
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Busy ticks of the whole machine (everything but idle and iowait).
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
nginx_pids() { echo "$nginx_pid"; pgrep -P "$nginx_pid" 2>/dev/null || true; }
# Prints "inst redis nginx wrk busy" CPU tick counters.
cpu_snapshot() {
  local inst=0 ngx=0 p
  for p in ${inst_pids[@]+"${inst_pids[@]}"}; do inst=$((inst + $(proc_ticks "$p"))); done
  for p in $(nginx_pids); do ngx=$((ngx + $(proc_ticks "$p"))); done
  echo "$inst $(proc_ticks "$redis_pid") $ngx $(proc_ticks "$wrk_pid") $(busy_ticks)"
}
# Machine CPU utilisation (%) over 0.5 s: taken while the servers idle, it shows what else runs.
background_busy() {
  local a b t0 t1
  read -r a t0 < <(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
  sleep 0.5
  read -r b t1 < <(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
  echo $(((b - a) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
}
# Waits (at most quiet_wait seconds) until other work on the machine is below 15 % CPU, so
# parallel builds or tests do not skew a run; prints the last background load measured.
wait_quiet() {
  local bg i
  bg=$(background_busy)
  for ((i = 0; i < quiet_wait * 2 && bg >= 15; i++)); do bg=$(background_busy); done
  echo "$bg"
}
# Largest VmHWM (peak RSS, KiB) of the running servers, and the list "a/b/c".
rss_of_servers() {
  local p v list="" max=0
  for p in ${inst_pids[@]+"${inst_pids[@]}"}; do
    v=$(awk '/^VmHWM:/{print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    list+="${list:+/}$v"
    [ "${v:-0}" -gt "$max" ] && max=$v
  done
  echo "$max ${list:--}"
}
printf 'id\tscenario\tlabel\tstrategy\tsegments\thold_ms\tthreads\tconns\ttarget\trate\tp50_ms\tp90_ms\tp99_ms\tp999_ms\tcreated\tunits\ts200\ts409\ts503\tother\tsock_err\tunanswered\ttop_per_order\tall_per_order\tmon_client_per_order\trss_max_kib\trss_kib\tcpu_inv_us\tcpu_redis_us\tcpu_nginx_us\tcpu_wrk_us\tcpu_rest_us\tbusy_pct\tbg_pct\tothers_pct\tlive\tverify\n' >"$tsv"
failures=0

# run_case key=value...: one wrk run (after a warm-up run) and its checks. Keys:
#   id label scen          names (id is also the raw file name)
#   kind                   inventoryd | bare | none (servers to start; "keep" reuses running ones)
#   strategy segments hold threads n (servers)   inventoryd settings
#   target                 nginx | direct (wrk to the first server) | nginx204
#   script ok              wrk script and its LT_OK
#   conns                  wrk connections
#   sku stock              SKU to preheat (stock "" = no PUT: reuse the SKU as it is)
#   verify                 1: check the invariants after the run; expect_sold_out 1
#   monitor profile keep   MONITOR the run; perf-profile it; keep servers + data afterwards
#   warmup                 seconds of warm-up (LT_WARMUP_S)
#   base_units base_orders base_unanswered stock_total   what earlier runs on the same SKU did
run_case() {
  local -A o=([kind]=inventoryd [strategy]=segmented [segments]=16 [hold]=0 [threads]=$threads_h0
    [n]=$instances [target]=nginx [script]=order.lua [ok]=201 [conns]=$conns [sku]="" [stock]=$stock
    [verify]=1 [expect_sold_out]=0 [monitor]=0 [profile]=0 [keep]=0 [label]="" [scen]="" [warmup]=$warmup)
  local kv
  for kv in "$@"; do o[${kv%%=*}]=${kv#*=}; done
  local id=${o[id]}
  local raw=$res/raw/$id
  if [ "$planning" = 1 ]; then # the planning pass only counts the runs (progress())
    planned=$((planned + 1)) last_disturbed=0
    return 0
  fi
  runs_started=$((runs_started + 1))
  log "run $id [$(progress "${o[scen]}" "${o[warmup]}")]: ${o[label]}"

  if [ "${o[kind]}" = inventoryd ]; then
    start_servers inventoryd "${o[n]}" "${o[threads]}" --strategy "${o[strategy]}" --hold-ms "${o[hold]}"
  elif [ "${o[kind]}" = bare ]; then
    start_servers bare "${o[n]}" "${o[threads]}"
  fi
  [ -n "$nginx_pid" ] || start_nginx "${o[n]}"

  local sku=${o[sku]:-lt-$id}
  if [ -n "${o[stock]}" ] && [ "${o[kind]}" = inventoryd ]; then
    put_sku "$sku" "${o[stock]}" "${o[segments]}" "$raw.put.json"
  fi

  local url path
  case "${o[script]}" in status.lua) path="" ;; *) path=/api/v1/orders ;; esac
  case "${o[target]}" in
    nginx) url=http://127.0.0.1:$nginx_port$path ;;
    nginx204) url=http://127.0.0.1:$nginx_port/nginx-204 ;;
    direct) url=http://127.0.0.1:${inst_ports[0]}$path ;;
  esac

  # The drain may take as long as the slowest order: a full lock wait plus the hold.
  drain_max=$(((lock_wait + o[hold] + 999) / 1000 + 2))
  local checked=0
  [ "${o[verify]}" = 1 ] && [ "${o[kind]}" != bare ] && [ "${o[target]}" != nginx204 ] && checked=1

  # Warm-up (connections, script cache, allocator): real requests, counted for the invariants,
  # not for the rates or latencies.
  local warm_units=0 warm_created=0 warm_unanswered=0
  if [ "${o[warmup]}" != 0 ]; then
    start_wrk "$raw.warmup" "${o[warmup]}"
    finish_wrk "$raw.warmup"
    warm_units=$(field units "$result"); warm_created=$(field created "$result")
    warm_unanswered=$(field unanswered "$result")
  fi

  local bg; bg=$(wait_quiet)
  cmdstats >"$raw.cmdstats.before"
  local cpu0 cpu1 t0 t1
  if [ "${o[monitor]}" = 1 ]; then
    # redis-cli itself, not through rcli(): $! must be its pid, so stop_pid really stops it
    redis-cli -p "$redis_port" monitor >"$raw.monitor" 2>/dev/null &
    mon_pid=$!
    sleep 0.2
  fi
  t0=$(date +%s%N)
  start_wrk "$raw" "$window"
  cpu0=$(cpu_snapshot)
  if [ "${o[profile]}" = 1 ]; then
    # Two recordings of the middle of the window: the whole machine without call graphs (who
    # uses the CPU), and the instances with DWARF call graphs (which code paths, inclusive).
    sleep 1
    perf record -a -F 499 -o "$res/perf-all.data" -- sleep $((window - 2)) >"$res/logs/perf.log" 2>&1 &
    perf_pid=$!
    perf record -p "$(IFS=,; echo "${inst_pids[*]}")" --call-graph dwarf,16384 -F 499 \
      -o "$res/perf-inv.data" -- sleep $((window - 2)) >>"$res/logs/perf.log" 2>&1 &
    perf_pid2=$!
    # Syscalls and context switches per component over the same interval.
    perf_stat_pids=()
    local grp pids
    for grp in inventoryd redis nginx; do
      case $grp in
        inventoryd) pids=$(IFS=,; echo "${inst_pids[*]}") ;;
        redis) pids=$redis_pid ;;
        nginx) pids=$(nginx_pids | paste -sd,) ;;
      esac
      perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pids" -o "$raw.perfstat.$grp" \
        -- sleep $((window - 2)) >/dev/null 2>&1 &
      perf_stat_pids+=($!)
    done
  fi
  if [ "$checked" = 1 ] && [ "${o[monitor]}" != 1 ]; then
    # A mid-window snapshot of the invariants that hold at every instant.
    sleep "$(awk -v w="$window" 'BEGIN{print w / 2}')"
    if "$lt/verify.sh" --redis-port "$redis_port" --sku "$sku" --live >"$raw.live.txt" 2>&1; then
      o[live]=✓
    else
      [ $? -eq 1 ] && o[live]=✗ || o[live]="?"
    fi
    sleep "$(awk -v w="$window" 'BEGIN{print w / 2}')"
  else
    o[live]=—
    sleep "$window"
  fi
  cpu1=$(cpu_snapshot)
  t1=$(date +%s%N)
  if [ -n "$perf_pid" ]; then
    wait "$perf_pid" 2>/dev/null || true
    wait "$perf_pid2" 2>/dev/null || true
    for p in "${perf_stat_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    perf_pid="" perf_pid2="" perf_stat_pids=()

  fi
  finish_wrk "$raw"
  if [ -n "$mon_pid" ]; then stop_pid "$mon_pid" 10; mon_pid=""; fi
  cmdstats >"$raw.cmdstats.after"
  local rss; rss=$(rss_of_servers)

  local created units unanswered
  created=$(field created "$result"); units=$(field units "$result"); unanswered=$(field unanswered "$result")
  local tot_units=$((units + warm_units + ${o[base_units]:-0}))
  local tot_created=$((created + warm_created + ${o[base_orders]:-0}))
  local tot_unanswered=$((unanswered + warm_unanswered + ${o[base_unanswered]:-0}))

  # Redis commands per successful order: top level = what clients sent (scripts by SHA and the
  # few commands a script never runs); all = every command including those run inside scripts.
  local top all
  read -r top all < <(awk -v created="$created" '
    FNR == NR { before[$1] = $2; next }
    {
      d = $2 - before[$1]
      # the harness: INFO/CONFIG/MONITOR, redis-cli'"'"'s COMMAND DOCS, the live check'"'"'s MULTI/EXEC
      if ($1 ~ /^(info|config\|.*|monitor|command|command\|.*|multi|exec|hlen)$/) next
      all += d
      if ($1 ~ /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|ping|subscribe|unsubscribe|psubscribe|punsubscribe|ssubscribe|sunsubscribe|hello|auth|select|quit|reset|script\|.*|client\|.*)$/) top += d
    }
    END {
      if (created > 0) printf "%.3f %.3f\n", top / created, all / created
      else print "- -"
    }' "$raw.cmdstats.before" "$raw.cmdstats.after")
  if [ "$created" = 0 ] && [ "$checked" = 1 ]; then
    # no order succeeded (the 409 flood): commands per answer instead, e.g. "0.000/409"
    read -r top all < <(awk -v n="$(field answered "$result")" '
      FNR == NR { before[$1] = $2; next }
      { d = $2 - before[$1]; if ($1 ~ /^(info|config\|.*|monitor|command|command\|.*|multi|exec|hlen)$/) next; all += d }
      END { if (n > 0) printf "%.3f/ans %.3f/ans\n", all / n, all / n; else print "- -" }' \
      "$raw.cmdstats.before" "$raw.cmdstats.after")
  fi
  local mon="-"
  if [ "${o[monitor]}" = 1 ] && [ -s "$raw.monitor" ]; then
    # MONITOR marks commands run by a script "[db lua]" and client commands "[db addr:port]".
    # (COMMAND and INFO are redis-cli's own.)
    awk '/^[0-9.]+ \[[0-9]+ lua\]/ { lua[$4]++; next }
         $4 == "\"COMMAND\"" || $4 == "\"info\"" || $4 == "\"INFO\"" { next }
         /^[0-9.]+ \[[0-9]+ [^]]+\]/ { cli[$4]++ }
         END { for (c in cli) print "client", c, cli[c]; for (c in lua) print "script", c, lua[c] }' \
      "$raw.monitor" | sort >"$raw.monitor.summary"
    mon=$(awk -v created="$created" '$1 == "client" { n += $3 } END { if (created > 0) printf "%.3f", n / created; else print "-" }' "$raw.monitor.summary")
    gzip -f "$raw.monitor"
  fi

  # CPU per answered-in-window request, by component (µs).
  local cpu; cpu=$(awk -v a="$cpu0" -v b="$cpu1" -v rate="$(field rate "$result")" -v w="$window" \
    -v ns="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v ncpu="$(getconf _NPROCESSORS_ONLN)" 'BEGIN {
      split(a, x, " "); split(b, y, " ")
      n = rate * w; if (n <= 0) n = 1
      us = 1e6 / hz
      inv = (y[1] - x[1]) * us / n; red = (y[2] - x[2]) * us / n; ngx = (y[3] - x[3]) * us / n
      wrk = (y[4] - x[4]) * us / n
      busy = (y[5] - x[5]) * us
      rest = busy / n - inv - red - ngx - wrk
      pct = 100 * busy / (ns / 1000) / ncpu
      restpct = 100 * rest * n / (ns / 1000) / ncpu
      printf "%.1f %.1f %.1f %.1f %.1f %.0f %.0f\n", inv, red, ngx, wrk, rest, pct, restpct }')
  local others=${cpu##* }
  cpu=${cpu% *}
  # "rest" is CPU that none of the run's processes used (kernel work not charged to them, and
  # any other process). Above LT_DISTURBED_PCT % of the machine, something else was running (a
  # build, a test) and the numbers are suspect: measure() runs it again. (Not for MONITOR runs:
  # their redis-cli is such a process.)
  last_disturbed=0
  if [ "${o[monitor]}" != 1 ] && [ "$others" -gt "$disturbed_pct" ]; then
    last_disturbed=1
  fi

  local verdict="—"
  if [ "$checked" = 1 ]; then
    # Everything this SKU ever answered 201: earlier runs on it (base_*), the warm-up, the run.
    local vargs=(--redis-port "$redis_port" --sku "$sku"
      --units "$tot_units" --orders "$tot_created" --unanswered "$tot_unanswered" --max-qty "$qty"
      --stock-total "${o[stock_total]:-${o[stock]}}"
      --status-url "http://127.0.0.1:$nginx_port/api/v1/skus/$sku?consistent=1")
    [ "${o[expect_sold_out]}" = 1 ] && vargs+=(--expect-sold-out)
    local vrc=0
    "$lt/verify.sh" "${vargs[@]}" >"$raw.verify.txt" 2>&1 || vrc=$?
    if [ "$vrc" -eq 0 ]; then verdict=✓
    elif [ "$vrc" -eq 1 ]; then verdict=✗
    else die "verify.sh could not read Redis after run $id (exit $vrc)"; fi
  fi
  if [ "$verdict" = ✗ ] || [ "${o[live]}" = ✗ ]; then
    failures=$((failures + 1))
    log "INVARIANT VIOLATION in run $id:"
    grep -h '✗' "$raw.verify.txt" "$raw.live.txt" 2>/dev/null | sed 's/^/    /' >&2 || true
  fi
  if [ "${o[live]}" = "?" ]; then die "live verify could not read Redis in run $id"; fi
  # Make the last values visible to the caller (the sell-out phase hands them to the flood).
  last_units=$tot_units last_created=$tot_created last_unanswered=$tot_unanswered last_sku=$sku

  local sockerr=$(( $(field sock_connect "$result") + $(field sock_read "$result") + $(field sock_write "$result") + $(field sock_timeout "$result") ))
  local other=$(( $(field s4xx "$result") + $(field s5xx "$result") + $(field other "$result") ))
  ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$id" "${o[scen]}" "${o[label]}" "${o[strategy]}" "${o[segments]}" "${o[hold]}" "${o[threads]}" \
    "${o[conns]}" "${o[target]}" "$(field rate "$result")" "$(ms "$(field p50_us "$result")")" \
    "$(ms "$(field p90_us "$result")")" "$(ms "$(field p99_us "$result")")" "$(ms "$(field p999_us "$result")")" \
    "$created" "$units" "$(field s200 "$result")" "$(field s409 "$result")" "$(field s503 "$result")" \
    "$other" "$sockerr" "$unanswered" "$top" "$all" "$mon" ${rss} ${cpu} "$bg" "$others" "${o[live]}" "$verdict" >>"$tsv"
  log "  $(field rate "$result") ok/s  p50 $(ms "$(field p50_us "$result")") ms  p99 $(ms "$(field p99_us "$result")") ms  201=$created 409=$(field s409 "$result") 503=$(field s503 "$result") other=$other  cmds/order top=$top all=$all  live=${o[live]} verify=$verdict"

  if [ "${o[keep]}" != 1 ]; then
    stop_nginx
    [ "${o[kind]}" = none ] || stop_instances
    rcli flushall >/dev/null
  fi
}

# value_of ID COLUMN: a cell of runs.tsv.
value_of() {
  awk -F'\t' -v id="$1" -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $1 == id { print $c[col]; exit }' "$tsv"
}

# Progress: the scenarios are first walked with planning=1 (run_case only counts), so each run's
# log line can say which run of how many it is, its scenario and about how long is left: until
# two runs are done, per run warm-up + window + 6 s of set-up and checks; then the average so far.
planning=0 planned=0 runs_started=0 progress_t0=$SECONDS
last_units=${last_units:-0} last_created=${last_created:-0} last_unanswered=${last_unanswered:-0} last_sku=${last_sku:-}
scen_name() {
  case $1 in
    a) echo "a: segment sweep" ;; b) echo "b: strategies" ;; c) echo "c: sell-out + 409 flood" ;;
    d) echo "d: mixed" ;; e) echo "e: ceilings" ;; f) echo "f: RSS" ;; m) echo "m: MONITOR" ;;
    p) echo "p: profile" ;; *) echo "$1" ;;
  esac
}
# progress SCENARIO WARMUP_S: "3/12, scenario a: segment sweep, about 1m20s left".
progress() {
  local done=$((runs_started - 1)) left per
  if [ "$done" -ge 2 ]; then per=$(((SECONDS - progress_t0) / done)); else per=$((${2:-$warmup} + window + 6)); fi
  left=$(((planned - done) * per))
  [ "$left" -ge 0 ] || left=0
  printf '%d/%d, scenario %s, about %dm%02ds left' "$runs_started" "$planned" "$(scen_name "$1")" \
    $((left / 60)) $((left % 60))
}

# measure key=value...: run_case, repeated (LT_RETRIES) while another process disturbed it.
measure() {
  local attempt
  for ((attempt = 0; ; attempt++)); do
    local before=$failures
    run_case "$@"
    [ "$last_disturbed" = 1 ] && [ "$attempt" -lt "$retries" ] && [ "$failures" = "$before" ] || break
    log "  disturbed by other processes (see the rest CPU column); measuring again"
    sed -i '$d' "$tsv"
  done
}

# --- the scenarios ----------------------------------------------------------------------------

log "results in $res"
start_redis
log "redis on $redis_port, instance ports ${inst_ports[*]}, window ${window}s, $conns connections, $wrk_threads wrk threads"
threads_for() { [ "$1" = 0 ] && echo "$threads_h0" || echo "$threads_h2"; }

scenarios() {
if has a; then
  for h in $holds; do
    for s in $sweep; do
      measure id="a-seg$s-h$h" scen=a label="segmented, $s segments, hold $h ms" \
        segments="$s" hold="$h" threads="$(threads_for "$h")"
    done
  done
fi
if has b; then
  for h in $holds; do
    for st in single-lock atomic segmented; do
      # the segmented point is already in the sweep when the sweep has strategy_segments
      if [ "$st" = segmented ] && has a && [[ " $sweep " == *" $strategy_segments "* ]]; then continue; fi
      [ "$quick" = 1 ] && [ "$st" = atomic ] && [ "$h" != 0 ] && continue
      measure id="b-$st-h$h" scen=b label="$st, $strategy_segments segments, hold $h ms" \
        strategy="$st" segments="$strategy_segments" hold="$h" threads="$(threads_for "$h")"
    done
  done
fi
if has c; then
  run_case id=c-sellout scen=c label="sell-out: $sellout_stock units, 16 segments, hold 0" \
    segments=16 stock="$sellout_stock" expect_sold_out=1 keep=1 warmup=0
  run_case id=c-flood409 scen=c label="409 flood on the sold-out SKU" kind=keep segments=16 \
    sku="$last_sku" stock="" ok=409 expect_sold_out=1 base_units="$last_units" \
    base_orders="$last_created" base_unanswered="$last_unanswered" stock_total="$sellout_stock"
fi
if has d; then
  measure id=d-mixed scen=d label="90 % orders / 10 % status reads, 16 segments, hold 0" \
    script=status.lua segments=16
fi
if has e; then
  measure id=e-bare scen=e label="bare libmicrohttpd handler ×$instances via nginx" kind=bare \
    strategy=- segments=- script=ceiling.lua ok=2xx verify=0 stock=""
  measure id=e-nginx204 scen=e label="nginx return 204" kind=none strategy=- segments=- \
    target=nginx204 script=ceiling.lua ok=2xx verify=0 stock="" n="$instances"
  if [ "$quick" = 0 ]; then
    measure id=e-bare-direct scen=e label="bare handler, 1 instance, direct (no nginx)" kind=bare n=1 \
      strategy=- segments=- target=direct script=ceiling.lua ok=2xx verify=0 stock=""
    measure id=e-atomic-direct scen=e label="atomic, 16 segments, 1 instance, direct (no nginx)" n=1 \
      strategy=atomic target=direct
    measure id=e-segmented-direct scen=e label="segmented, 16 segments, 1 instance, direct (no nginx)" n=1 \
      target=direct
  fi
fi
if has f; then
  measure id=f-rss256 scen=f label="segmented, 16 segments, hold 0, $rss_conns connections direct to 1 instance" \
    n=1 target=direct conns="$rss_conns"
fi
if has m; then
  for st in segmented atomic single-lock; do
    [ "$quick" = 1 ] && [ "$st" != segmented ] && continue
    measure id="m-$st" scen=m label="MONITOR calibration: $st, 16 segments, hold 0" strategy="$st" monitor=1
  done
  if [ "$quick" = 0 ]; then
    measure id=m-segmented-h2 scen=m label="MONITOR calibration: segmented, 16 segments, hold 2" \
      hold=2 threads="$threads_h2" monitor=1
  fi
fi
}
planning=1; scenarios; planning=0
[ "$profile" != 0 ] && planned=$((planned + 2))
log "$planned runs planned (scenarios $scenarios)"
progress_t0=$SECONDS
scenarios
if [ "$profile" != 0 ]; then
  if perf record -o /dev/null -- true >/dev/null 2>&1; then
    for st in segmented atomic; do
      measure id="p-$st" scen=p label="perf profile: $st, 16 segments, hold 0" strategy="$st" profile=1
      pr() { perf report --stdio -g none "$@" 2>/dev/null | grep -v '^#' | grep -v '^$' || true; }
      # (|| true: head closes the pipe early, which pipefail would report)
      { pr -i "$res/perf-all.data" --no-children --sort comm | head -10; } >"$res/profile-$st-by-process.txt" || true
      { pr -i "$res/perf-inv.data" --no-children --sort dso | head -12; } \
        >"$res/profile-$st-inventoryd-dso.txt" || true
      { pr -i "$res/perf-inv.data" --no-children --sort dso,symbol | head -30; } \
        >"$res/profile-$st-inventoryd-self.txt" || true
      # (unresolved addresses are libmicrohttpd's internals: its package has no symbols)
      { pr -i "$res/perf-inv.data" --children --sort symbol | grep -F '[.]' | grep -v '\[\.\] 0x' | head -30; } \
        >"$res/profile-$st-inventoryd-inclusive.txt" || true
      rm -f "$res"/perf-*.data "$res"/perf-*.data.old
      # per successful order: the counters cover (window - 2) s of the window
      {
        echo "component  syscalls/order  context-switches/order"
        for grp in inventoryd redis nginx; do
          awk -F, -v g="$grp" -v n="$(awk -v r="$(value_of "p-$st" rate)" -v w="$window" 'BEGIN { print r * (w - 2) }')" '
            $3 == "raw_syscalls:sys_enter" { sc = $1 } $3 == "context-switches" { cs = $1 }
            END { if (n > 0) printf "%-10s %14.1f  %22.1f\n", g, sc / n, cs / n }' "$res/raw/p-$st.perfstat.$grp"
        done
      } >"$res/profile-$st-syscalls.txt" 2>/dev/null || true
    done
  else
    log "perf is not usable here: no profile (see docs/performance.md for callgrind)"
  fi
fi

stop_pid "$redis_pid" 50; redis_pid=""
"$lt/report.sh" "$res" "$([ "$quick" = 1 ] && echo quick || echo full)" || log "report.sh failed (results are in $tsv)"
ln -sfn "$(basename "$res")" "$results_root/latest" 2>/dev/null || true
if [ "$failures" -gt 0 ]; then
  log "FAILED: $failures run(s) violated the SPEC §8 invariants (see $res/REPORT.md and raw/*.verify.txt)"
  exit 1
fi
log "all runs passed their invariant checks; report: $res/REPORT.md"
