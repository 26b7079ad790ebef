#!/usr/bin/env bash
# The cost of the sale rules of issue 20 (SPEC §11), docs/performance.md "Sale rules: limits and
# holds (issue 20)". Not part of scripts/test.sh. 6–9 minutes with the defaults (more on a
# loaded machine).
#
# (1) orders: orders/s, p99 and Redis calls per order, SKU A plain vs SKU B with limit_per_user
#     (RL_LIMIT, 1000: never refuses) and reservation_ttl_s (RL_TTL, 60: no hold expires during
#     the run), both sent by loadtest/user_order.lua (body user_id, one of RL_USERS users at
#     random, instances with --trust-body-user-id), alternating A B A B … (RL_ROUNDS rounds) in
#     one run: direct to one instance and through nginx to 3. wrk -t2 -c64, 16 segments,
#     quantity 1, hold 0, --threads 2, RL_WINDOW s per run; each run on fresh instances and an
#     empty Redis, SPEC §8 checked after it (loadtest/verify.sh, holds counted live).
# (2) sweep: with 1 and with 3 instances, H = each of RL_HOLDS live holds (quantity 1, 64
#     segments, limit 1000, distinct users) made through the API as fast as wrk goes (until the
#     SKU sells out: stock = H), then
#       idle    RL_IDLE s with holds live and none due: the sweeper's probes per second per
#               instance (EVALSHA calls: EXPIRE per segment + the layout reads) and Redis CPU;
#       expiry  with the instances running, until no hold is left: Redis CPU per expired hold
#               (used_cpu_sys+user delta), EVALSHA usec_per_call and usec per hold, from the
#               first due time to the last expiry seen, the worst lateness seen (the SPEC's
#               "within 1 s of expires_at");
#       backlog (the largest H only) another H holds, the instances SIGSTOPped until every hold
#               is due, then SIGCONT: how long H due holds take to expire, and the same costs.
#     After each: every unit back (Σ stock = H), users' entries and give-back queues empty,
#     SPEC §8 from Redis (verify.sh).
#
# Usage: loadtest/rules.sh [--only orders|sweep] [--no-nginx] [--baseline BIN] [--out DIR]
#   --baseline BIN  (1) also with an older inventoryd, each of its runs right after the same
#                   run of this build (topology "direct_base", "nginx_base"); SKU A is not run
#                   again: its path is the same code in both, so both are compared with it
# Env: BUILD_DIR (build), RL_WINDOW (6), RL_ROUNDS (3), RL_USERS (100000), RL_LIMIT (1000),
#      RL_TTL (60), RL_HOLDS ("1000 100000"), RL_SWEEP_INSTANCES ("1 3"), RL_IDLE (5),
#      RL_HOLD_TTL_SMALL (10, H ≤ 10000), RL_HOLD_TTL (30: must exceed the time to make H holds),
#      RL_KINDS ("A B"; also L: the limit alone, H: holds alone, to tell their costs apart; G: B
#      with the order log on, --order-log on the instances, issue 23's "limits, holds and the
#      order log on").
# Writes DIR/REPORT.md (default loadtest/results/<UTC stamp>-rules/) with the tables, the load
# average before each part and each run's raw lines. Exit 0 every check passed, 1 a check
# failed, 3 infrastructure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest
only="" nginx=1 out="" baseline=""
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --no-nginx) nginx=0; shift ;;
    --baseline) baseline=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "rules.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=$build_dir/bin/inventoryd
kinds=${RL_KINDS:-A B} window=${RL_WINDOW:-6} rounds=${RL_ROUNDS:-3} users=${RL_USERS:-100000}
limit=${RL_LIMIT:-1000} ttl=${RL_TTL:-60} holds_list=${RL_HOLDS:-1000 100000}
sweep_instances=${RL_SWEEP_INSTANCES:-1 3} idle=${RL_IDLE:-5}
hold_ttl_small=${RL_HOLD_TTL_SMALL:-10} hold_ttl=${RL_HOLD_TTL:-30}
instances=3 port_min=${LT_PORT_MIN:-20000} port_max=${LT_PORT_MAX:-32000}
wrk_threads=2 lock_wait=2000 drain_max=6
stamp=$(date -u +%Y%m%dT%H%M%SZ)
res=${out:-$lt/results/$stamp-rules}
mkdir -p "$res/raw" "$res/logs"
run_dir=$res/run
mkdir -p "$run_dir"
lib_name=rules
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"
check_tools
[ -x "$bin" ] || die "no $bin (cmake --build $build_dir)"
install_cleanup
start_redis
export LT_REDIS_PORT=$redis_port LT_USERS=$users
pick_instance_ports
failed=0
report=$res/REPORT.md
raw=$res/raw/lines.txt
py() { python3 "$lt/rules_redis.py" "$@"; }
calc() { awk "BEGIN { $1 }"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
check() { # check WHAT CMD...: a check of the run; a failure is counted and logged
  local what=$1; shift
  if "$@" >>"$res/logs/checks.log" 2>&1; then log "  ✓ $what"; else log "  ✗ $what"; failed=1; fi
}
# put SKU STOCK SEGMENTS RULES_JSON: PUT through instance 0 (--admin-allow-loopback).
put() {
  curl -fsS --max-time 10 -X PUT -H 'Content-Type: application/json' \
    -d "{\"stock\":$2,\"segments\":$3$4}" "http://127.0.0.1:${inst_ports[0]}/api/v1/skus/$1" \
    >>"$res/logs/curl.log" 2>&1 || die "PUT $1 failed"
  echo >>"$res/logs/curl.log"
}
# metric NAME[{labels}] : Σ over the running instances of a /metrics counter.
metric() {
  local i s=0 v
  for ((i = 0; i < ${#inst_pids[@]}; i++)); do
    v=$(curl -fsS --max-time 5 "http://127.0.0.1:${inst_ports[i]}/metrics" | grep -v "^#" | grep -F "$1 " | awk '{print $2}' | head -1)
    s=$(calc "printf \"%.0f\", $s + ${v:-0}")
  done
  echo "$s"
}
orders_total() {
  local i s=0 v
  for ((i = 0; i < ${#inst_pids[@]}; i++)); do
    v=$(curl -fsS --max-time 5 "http://127.0.0.1:${inst_ports[i]}/metrics" | awk '/^inventory_orders_total\{/ {s += $2} END {print s + 0}')
    s=$((s + v))
  done
  echo "$s"
}
# CPU ticks (USER_HZ) of the instances, and of the whole machine (busy), from /proc.
inst_ticks() {
  local p t=0
  for p in "${inst_pids[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo "$t"
}
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# Ticks of the benchmark's own processes: the instances, Redis, nginx (workers too), wrk.
own_ticks() {
  local p t=0
  for p in "${inst_pids[@]}" "$redis_pid" ${nginx_pid:+"$nginx_pid"} ${nginx_pid:+$(pgrep -P "$nginx_pid")} ${wrk_pid:+"$wrk_pid"}; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
start_instances() { # N [FLAG...]: an empty Redis, fresh instances 0..N-1 with the rules flags
  stop_instances
  rcli flushall >/dev/null
  start_servers inventoryd "$1" 2 --hold-ms 0 --trust-body-user-id "${@:2}"
}

# ---- (1) orders with and without the rules ------------------------------------------------
order_rows=()
# order_run TOPO KIND ROUND: TOPO direct|nginx, KIND A|B|L|H|G.
order_run() {
  local topo=$1 kind=$2 round=$3 n=1 url rules="" s0 s1 c0 c1 o0 o1 pfx
  [ "${topo%_base}" = nginx ] && n=3
  stop_nginx
  if [ "$kind" = G ]; then start_instances "$n" --order-log; else start_instances "$n"; fi
  url=http://127.0.0.1:${inst_ports[0]}/api/v1/orders
  if [ "$n" = 3 ]; then
    start_nginx 3
    url=http://127.0.0.1:$nginx_port/api/v1/orders
  fi
  case $kind in
    B | G) rules=",\"limit_per_user\":$limit,\"reservation_ttl_s\":$ttl" ;;
    L) rules=",\"limit_per_user\":$limit" ;;
    H) rules=",\"reservation_ttl_s\":$ttl" ;;
  esac
  sku=rl$kind
  put "$sku" 1000000000 16 "$rules"
  local i
  for ((i = 0; i < n; i++)); do # each instance caches the layout before the counts start
    curl -fsS -X POST -H 'Content-Type: application/json' \
      -d "{\"sku\":\"$sku\",\"quantity\":1,\"user_id\":\"warm$i\"}" \
      "http://127.0.0.1:${inst_ports[i]}/api/v1/orders" >/dev/null || die "warm-up order failed"
  done
  c0=$(metric inventory_order_redis_calls_total); o0=$(orders_total)
  s0=$(py snap)
  local i0 b0 i1 b1 w0 w1 m0 m1 t0 t1
  i0=$(inst_ticks); b0=$(busy_ticks)
  pfx=$res/raw/orders-$topo-$kind-$round
  local la; la=$(loadavg)
  declare -A o=([conns]=64 [script]=user_order.lua [ok]=201)
  qty=1
  start_wrk "$pfx" "$window"
  w0=$(own_ticks); m0=$(busy_ticks); t0=$(date +%s.%N)
  sleep "$window"
  w1=$(own_ticks); m1=$(busy_ticks); t1=$(date +%s.%N)
  finish_wrk "$pfx"
  i1=$(inst_ticks); b1=$(busy_ticks)
  s1=$(py snap)
  c1=$(metric inventory_order_redis_calls_total); o1=$(orders_total)
  local created units un rate p99 top usec cpu calls
  created=$(field created "$result"); units=$(field units "$result")
  un=$(( $(field unanswered "$result") + $(field s503_unknown "$result") ))
  rate=$(field rate "$result"); p99=$(field p99_us "$result")
  top=$(calc "printf \"%.2f\", ($(field evalsha_calls "$s1") - $(field evalsha_calls "$s0")) / $created")
  usec=$(calc "printf \"%.1f\", ($(field evalsha_usec "$s1") - $(field evalsha_usec "$s0")) / $created")
  cpu=$(calc "printf \"%.1f\", ($(field cpu_ms "$s1") - $(field cpu_ms "$s0")) * 1000 / $created")
  local icpu mcpu others bcpu
  # the benchmark's own CPU (wrk, nginx, instances, Redis) in the window per 201 in the window:
  # what bounds orders/s on a CPU-bound machine, less disturbed by other work than orders/s
  bcpu=$(calc "n = $(field rate "$result") * $window; if (n > 0) printf \"%.1f\", ($w1 - $w0) * 1e6 / $hz / n; else print \"-\"")
  # the machine's busy CPU during the window that was not the benchmark's, in % of the CPUs
  others=$(calc "o = (($m1 - $m0) - ($w1 - $w0)) * 100 / $hz / (($t1 - $t0) * $(nproc)); printf \"%.0f\", o < 0 ? 0 : o")
  icpu=$(calc "printf \"%.1f\", ($i1 - $i0) * 1e6 / $hz / $created")
  mcpu=$(calc "printf \"%.1f\", ($b1 - $b0) * 1e6 / $hz / $created")
  local lost
  lost=$(calc "printf \"%.2f\", ($(field pttl_calls "$s1") - $(field pttl_calls "$s0")) / $created")
  calls=$(calc "d = $o1 - $o0; if (d > 0) printf \"%.2f\", ($c1 - $c0) / d; else print \"-\"")
  echo "orders $topo $kind $round load=[$la] $result" >>"$raw"
  local verdict=ok
  if ! "$lt/verify.sh" --redis-port "$redis_port" --sku "$sku" --units "$((units + n))" \
       --orders "$((created + n))" --unanswered "$un" --stock-total 1000000000 \
       >"$pfx.verify" 2>&1; then
    verdict=VIOLATED; failed=1; tail -5 "$pfx.verify" >&2
  fi
  log "$topo $kind round $round: $rate orders/s, p99 $p99 µs, $calls Redis calls/order (metric), $top EVALSHA/order, §8 $verdict (load $la)"
  order_rows+=("$topo|$kind|$round|$rate|$(calc "printf \"%.1f\", $p99 / 1000")|$calls|$top|$lost|$usec|$cpu|$icpu|$mcpu|$bcpu|$created|$(field s409 "$result")|$(field s503 "$result")|$la|$others|$verdict")
  eval "rate_${topo}_${kind}_$round=$rate"
  eval "p99_${topo}_${kind}_$round=$p99"
  eval "bcpu_${topo}_${kind}_$round=$bcpu"
  eval "calls_${topo}_${kind}_$round=$calls"
}

if [ -z "$only" ] || [ "$only" = orders ]; then
  log "part 1: orders with and without the rules (load $(loadavg))"
  topos=direct
  [ "$nginx" = 1 ] && topos="direct nginx"
  for topo in $topos; do
    for ((rd = 1; rd <= rounds; rd++)); do
      for kind in $kinds; do
        order_run "$topo" "$kind" "$rd"
        if [ -n "$baseline" ] && [ "$kind" != A ]; then
          cur=$bin; bin=$baseline
          order_run "${topo}_base" "$kind" "$rd"
          bin=$cur
        fi
      done
    done
    stop_nginx
  done
fi

# ---- (2) the sweep ------------------------------------------------------------------------
sweep_rows=() idle_rows=()
sweep_sku=rlsweep sweep_seg=64
# make_holds H TTL: PUT the SKU (stock H, 64 segments, the limit, TTL) and sell it out through
# instance 0 with wrk; sets made_s. Checks that H holds are live.
make_holds() {
  local h=$1 t=$2 t0 waited
  put "$sweep_sku" "$h" "$sweep_seg" ",\"limit_per_user\":$limit,\"reservation_ttl_s\":$t"
  t0=$(date +%s.%N)
  LT_SKU=$sweep_sku LT_QTY=1 LT_USERS=$users LT_WINDOW_S=600 \
    wrk -t2 -c64 -d600s --timeout 10s -s "$lt/user_order.lua" \
    "http://127.0.0.1:${inst_ports[0]}/api/v1/orders" >"$res/raw/make-$h.wrk.txt" 2>&1 &
  wrk_pid=$!
  waited=$(py sold "$sweep_sku" "$sweep_seg" $((t - 2)))
  kill -INT "$wrk_pid" 2>/dev/null; wait "$wrk_pid" 2>/dev/null; wrk_pid=""
  made_s=$(calc "printf \"%.1f\", $(date +%s.%N) - $t0")
  [ "$(field sold "$waited")" = 1 ] || die "$h holds not made within the TTL ($t s): raise RL_HOLD_TTL"
  holds_now=$(py holds "$sweep_sku" "$sweep_seg")
  echo "make h=$h ttl=$t made_s=$made_s $holds_now" >>"$raw"
  if [ "$(field live "$holds_now") $(field r "$holds_now")" != "$h $h" ]; then
    die "made $h holds but Redis has $holds_now"
  fi
  log "  $h holds made in $made_s s through the API"
}
# after_expiry H: every unit back, entries and give-backs gone, SPEC §8.
after_expiry() {
  local h=$1 x
  x=$(py holds "$sweep_sku" "$sweep_seg")
  check "no hold left, Σ r = 0, Σ stock = $h (every unit back once)" \
    test "$(field live "$x") $(field r "$x") $(field stock "$x")" = "0 0 $h"
  check "users' entries, give-back and follow queues and intents empty" py settled "$sweep_sku" "$sweep_seg" 5
  check "SPEC §8 (verify.sh)" "$lt/verify.sh" --redis-port "$redis_port" --sku "$sweep_sku" \
    --stock-total "$h" --units 0 --orders 0
}
# costs MODE N H S0 S1 WATCH EXPIRED [SIGCONT_TO_LAST]: a row of the sweep table
costs() {
  local mode=$1 n=$2 h=$3 s0=$4 s1=$5 w=$6 ex=$7 cont=${8:--} calls usec cpu zr
  calls=$(( $(field evalsha_calls "$s1") - $(field evalsha_calls "$s0") ))
  usec=$(( $(field evalsha_usec "$s1") - $(field evalsha_usec "$s0") ))
  zr=$(( $(field zrevrange_usec "$s1") - $(field zrevrange_usec "$s0") ))
  cpu=$(calc "print $(field cpu_ms "$s1") - $(field cpu_ms "$s0")")
  local first last emptied
  first=$(field first_due "$holds_now"); last=$(field last_due "$holds_now")
  emptied=$(field emptied "$w")
  sweep_rows+=("$mode|$n|$h|$ex|$calls|$(calc "printf \"%.1f\", $usec / ($calls > 0 ? $calls : 1)")|$(calc "printf \"%.2f\", $usec / $h")|$(calc "printf \"%.2f\", ($cpu * 1000 - $zr) / $h")|$(calc "printf \"%.2f\", ($emptied - $first) / 1000")|$(calc "printf \"%.2f\", ($emptied - $last) / 1000")|$(field worst_late_ms "$w")|$(loadavg)|$cont")
  echo "sweep $mode n=$n h=$h s0=[$s0] s1=[$s1] watch=[$w] holds=[$holds_now] expired=$ex" >>"$raw"
}

if [ -z "$only" ] || [ "$only" = sweep ]; then
  log "part 2: the sweep (load $(loadavg))"
  for n in $sweep_instances; do
    start_instances "$n"
    for h in $holds_list; do
      t=$hold_ttl
      [ "$h" -le 10000 ] && t=$hold_ttl_small
      log "$n instance(s), $h holds, TTL $t s"
      make_holds "$h" "$t"
      # idle: holds live, none due
      x=$(py holds "$sweep_sku" "$sweep_seg")
      if [ $(( $(field first_due "$x") - $(field now "$x") )) -gt $(( (idle + 1) * 1000 )) ]; then
        s0=$(py snap); sleep "$idle"; s1=$(py snap)
        ic=$(( $(field evalsha_calls "$s1") - $(field evalsha_calls "$s0") ))
        idle_rows+=("$n|$h|$(calc "printf \"%.1f\", $ic / $idle / $n")|$(calc "printf \"%.1f\", ($(field evalsha_usec "$s1") - $(field evalsha_usec "$s0")) / ($ic > 0 ? $ic : 1)")|$(calc "printf \"%.2f\", ($(field cpu_ms "$s1") - $(field cpu_ms "$s0")) / $idle / 10")|$(loadavg)")
        echo "idle n=$n h=$h s0=[$s0] s1=[$s1]" >>"$raw"
      else
        log "  (no idle window: the first hold is due too soon; raise RL_HOLD_TTL)"
      fi
      e0=$(metric 'inventory_holds_total{event="expired"}')
      s0=$(py snap)
      w=$(py watch "$sweep_sku" "$sweep_seg" $((t + 120)))
      s1=$(py snap)
      e1=$(metric 'inventory_holds_total{event="expired"}')
      check "every hold expired within the watch" test "$(field 'done' "$w")" = 1
      costs expiry "$n" "$h" "$s0" "$s1" "$w" "$(calc "printf \"%.0f\", $e1 - $e0")"
      log "  expiry: $w"
      after_expiry "$h"
    done
    # backlog: the largest H, every hold due before any instance sweeps
    h=${holds_list##* }
    log "$n instance(s), backlog of $h due holds"
    make_holds "$h" "$hold_ttl"
    e0=$(metric 'inventory_holds_total{event="expired"}')
    for p in "${inst_pids[@]}"; do kill -STOP "$p"; done
    x=$(py holds "$sweep_sku" "$sweep_seg")
    sleep "$(calc "printf \"%.2f\", ($(field last_due "$x") - $(field now "$x")) / 1000 + 0.3")"
    s0=$(py snap)
    for p in "${inst_pids[@]}"; do kill -CONT "$p"; done
    w=$(py watch "$sweep_sku" "$sweep_seg" 120)
    s1=$(py snap)
    check "every hold expired within the watch" test "$(field 'done' "$w")" = 1
    e1=$(metric 'inventory_holds_total{event="expired"}')
    costs backlog "$n" "$h" "$s0" "$s1" "$w" "$(calc "printf \"%.0f\", $e1 - $e0")" \
      "$(calc "printf \"%.2f\", $(field emptied "$w") / 1000 - $(field t "$s0")")"
    log "  backlog: $w (SIGCONT at $(field t "$s0"))"
    after_expiry "$h"
  done
fi

# ---- the report ---------------------------------------------------------------------------
{
  echo "# loadtest/rules.sh — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Binary $bin ($(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+dirty')); $(nproc) CPUs; load average at the end $(loadavg)."
  if [ "${#order_rows[@]}" -gt 0 ]; then
    echo
    echo "## Orders: A plain vs B limit_per_user $limit + reservation_ttl_s $ttl (L: the limit alone, H: the holds alone)"
    echo
    echo "wrk -t2 -c64, ${window} s per run, 16 segments, quantity 1, hold 0, $users users at random (body user_id, --trust-body-user-id)."
    echo "*calls/order*: inventory_order_redis_calls_total / orders (the service's own count); *EVALSHA/order*, *lock attempts lost/order* (PTTL calls: an acquire that found the segment held), *Redis µs/order* (EVALSHA usec), *Redis CPU µs/order* (used_cpu_sys+user): INFO deltas per 201 (B includes its sweeper's probes); *inventoryd CPU*, *machine CPU* (all processes, wrk and nginx included, the drain too): /proc ticks per 201; *benchmark CPU*: the CPU of wrk, nginx, the instances and Redis during the window per 201 answered in it (on a CPU-bound machine orders/s ∝ 1 / this, and it moves less with other work than orders/s); *others' CPU*: the machine's busy time during the window not spent by the benchmark's processes (wrk, nginx, the instances, Redis), in % of all CPUs."
    echo
    echo "| topology | SKU | round | orders/s | p99 ms | calls/order | EVALSHA/order | lock attempts lost/order | Redis EVALSHA µs/order | Redis CPU µs/order | inventoryd CPU µs/order | machine CPU µs/order | benchmark CPU µs/order | 201 | 409 | 503 | load avg before | others' CPU % | SPEC §8 |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for r in "${order_rows[@]}"; do echo "| ${r//|/ | } |"; done
    echo
    for topo in direct direct_base nginx nginx_base; do
      for kind in $kinds; do
        [ "$kind" = A ] && continue
        sa=0 sb=0 pa="" pb="" per="" cap=""
        for ((rd = 1; rd <= rounds; rd++)); do
          a=$(eval "echo \${rate_${topo%_base}_A_$rd:-}"); b=$(eval "echo \${rate_${topo}_${kind}_$rd:-}")
          if [ -z "$a" ] || [ -z "$b" ]; then continue; fi
          sa=$(calc "printf \"%.1f\", $sa + $a"); sb=$(calc "printf \"%.1f\", $sb + $b")
          pa+="$(eval "echo \${p99_${topo%_base}_A_$rd}") "; pb+="$(eval "echo \${p99_${topo}_${kind}_$rd}") "
          per+="$(calc "printf \"%.2f\", $b / $a") "
          ca=$(eval "echo \${bcpu_${topo%_base}_A_$rd:-}"); cb=$(eval "echo \${bcpu_${topo}_${kind}_$rd:-}")
          if [ "$ca" != - ] && [ "$cb" != - ]; then cap+="$(calc "printf \"%.2f\", $ca / $cb") "; fi
        done
        med=$(tr ' ' '\n' <<<"$per" | grep . | sort -n | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2}')
        [ "$sa" = 0 ] || echo "- **$topo: $kind / A = $(calc "printf \"%.2f\", $sb / $sa")** over $rounds rounds, median of the rounds' ratios $med (each round: $per)$(case $kind in B | G) echo '; target ≥ 0.8' ;; esac); by the benchmark's CPU per order (A's ÷ $kind's), each round: $cap; p99 µs A: $pa/ $kind: $pb"
      done
    done
  fi
  if [ "${#idle_rows[@]}" -gt 0 ]; then
    echo
    echo "## The sweep, idle (holds live, none due, ${idle} s, no traffic)"
    echo
    echo "| instances | live holds | EVALSHA/s per instance | µs per EVALSHA | Redis CPU % | load avg |"
    echo "|---|---|---|---|---|---|"
    for r in "${idle_rows[@]}"; do echo "| ${r//|/ | } |"; done
  fi
  if [ "${#sweep_rows[@]}" -gt 0 ]; then
    echo
    echo "## The sweep, expiring"
    echo
    echo "*expiry*: instances running throughout (holds come due as they were made); *backlog*: instances SIGSTOPped until every hold was due, then SIGCONT (the last column: SIGCONT to the last expiry). EVALSHA: the sweeper's scripts (EXPIRE, user_release of the give-backs, layout reads); *Redis CPU µs/hold*: used_cpu_sys+user delta minus the watcher's own ZREVRANGE usec, per hold."
    echo
    echo "| mode | instances | holds | expired (metric) | EVALSHA calls | µs per EVALSHA | EVALSHA µs/hold | Redis CPU µs/hold | first due → last expiry s | last due → last expiry s | worst lateness seen ms | load avg | SIGCONT → last expiry s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for r in "${sweep_rows[@]}"; do echo "| ${r//|/ | } |"; done
  fi
  echo
  echo "Checks: $([ "$failed" = 0 ] && echo 'all passed' || echo 'FAILED (see logs/checks.log and raw/)')."
} >"$report"
cat "$report"
log "report in $report"
exit "$failed"
