#!/usr/bin/env bash
# inventoryd on Redis Cluster under load (issue 12; numbers in docs/scaling.md): 3 inventoryd
# instances behind nginx, wrk -t2 -c64 with loadtest/order.lua, the Redis side started here
# (scripts/cluster.sh for clusters) and stopped on exit.
#
# Usage: loadtest/cluster.sh [--bench] [--failover] [--reshard]        (default: all three)
#   --bench     orders/s and Redis CPU per order on: one redis-server (redis://); a one-master
#               cluster (every slot on one node) through redis:// (the server's cluster mode
#               alone) and through redis-cluster:// (plus the client's routing layer); 3
#               masters without replicas; 3 masters with a replica each at
#               --redis-replica-acks 0 and 1. SKU of 16 segments, --hold-ms 0, never sold out.
#   --failover  3 masters + 3 replicas (min-replicas-to-write 1), orders under load; at 1/4 of
#               the window kill -9 the master of some segments; its replica is promoted; the
#               old master is restarted (it comes back as a replica). Orders/s per second from
#               the SKU's sold counter; afterwards the SPEC §8 invariants (loadtest/verify.sh
#               style: GET status against Redis's segments) and the units of 201 answers against
#               what the cluster holds: with acks 1 none may be missing; with acks 0 the missing
#               ones are the loss window. Run with acks 0 and with acks 1.
#   --reshard   the same load while `redis-cli --cluster reshard` moves every slot of one
#               master (segments included) to another; then the invariants.
#   --routing   the routing layer's own cost: one instance (--threads 1) on a one-node cluster,
#               wrk -t1 -c16 straight to it, through redis:// and redis-cluster:// in turn
#               (LT_ROUNDS times, at least 3): orders/s and inventoryd's CPU per order
#               (/proc/PID/stat), which a loaded machine disturbs far less than orders/s.
# Exit: 0 all checks passed, 1 an invariant was violated, 3 infrastructure failure.
# Env: BUILD_DIR (build), LT_WINDOW_S (10 bench; 24 failover/reshard), LT_CONNECTIONS (64),
#      LT_WRK_THREADS (2), LT_THREADS (2: --threads per instance), LT_SEGMENTS (16),
#      LT_RESULTS_DIR (loadtest/results), LT_PORT_MIN/MAX (12000/22000: cluster bus ports,
#      port + 10000, stay below the ephemeral range), LT_ROUNDS (1: --bench repeats its whole
#      sequence, so that a machine shared with other work disturbs every topology alike).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest
modes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bench | --failover | --reshard | --routing) modes+=" ${1#--}"; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$modes" ] || modes=" bench failover reshard"

build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=${INVENTORYD_BIN:-$build_dir/bin/inventoryd}
instances=3
port_min=${LT_PORT_MIN:-12000}
port_max=${LT_PORT_MAX:-22000}
rounds=${LT_ROUNDS:-1}
wrk_threads=${LT_WRK_THREADS:-2}
conns=${LT_CONNECTIONS:-64}
threads=${LT_THREADS:-2}
segments=${LT_SEGMENTS:-16}
lock_wait=2000
qty=1
stamp=$(date -u +%Y%m%dT%H%M%SZ)
res=${LT_RESULTS_DIR:-$lt/results}/cluster-$stamp
run_dir=$res/run
mkdir -p "$res/raw" "$res/logs" "$run_dir"
lib_name=cluster
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

install_cleanup
check_tools
command -v python3 >/dev/null 2>&1 || die "python3 is not installed (scripts/deps.sh installs it)"
[ -x "$bin" ] || die "no inventoryd at $bin (build first)"
failed=0
redis_port="" redis_url_port=""
report=$res/REPORT.md
echo "# inventoryd on Redis Cluster — $(date -u +%FT%TZ)" >"$report"

# --- the Redis side ---------------------------------------------------------------------------

# cluster_up, cluster_down, slot_owner, node_back: loadtest/lib.sh.

# slots_of PORT: how many slots node PORT serves (CLUSTER NODES, myself).
slots_of() {
  redis-cli -p "$1" CLUSTER NODES | awk '/myself/ { for (i = 9; i <= NF; i++) {
    if ($i ~ /^\[/) continue; n = split($i, r, "-"); c += (n > 1 ? r[2] - r[1] + 1 : 1) } }
    END { print c + 0 }'
}

# one_node_cluster: one redis-server in cluster mode that owns all 16384 slots.
one_node_cluster() {
  redis_port="" # a fresh port (its cluster bus, port + 10000, must be free too)
  redis_args=(--cluster-enabled yes --cluster-config-file "$run_dir/nodes-$RANDOM.conf")
  start_redis
  redis_args=()
  rcli CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null || die "ADDSLOTSRANGE failed"
  wait_until 100 bash -c "redis-cli -p $redis_port CLUSTER INFO | grep -q cluster_state:ok" \
    || die "one-node cluster not ok"
  redis_url="redis-cluster://127.0.0.1:$redis_port"
  masters_ports=$redis_port
}

# cpu_of PORTS: "port=seconds ..." of used_cpu_user + used_cpu_sys per node.
cpu_of() {
  local p out=""
  for p in $1; do
    out+="$p=$(redis-cli -p "$p" INFO cpu | tr -d '\r' |
      awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}') "
  done
  echo "$out"
}
# cpu_delta BEFORE AFTER: the per-node seconds between two cpu_of lines, "s1 s2 ...".
cpu_delta() {
  local b a out="" kv p
  for kv in $2; do
    p=${kv%%=*} a=${kv#*=}
    b=$(tr ' ' '\n' <<<"$1" | sed -n "s/^$p=//p")
    out+="$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a - b}') "
  done
  echo "${out% }"
}

# --- inventoryd, nginx, wrk --------------------------------------------------------------------

# up ARGS...: 3 instances on $redis_url (extra inventoryd flags ARGS) and nginx.
up() {
  pick_instance_ports
  redis_url_override=$redis_url
  start_servers inventoryd "$instances" "$threads" --hold-ms 0 "$@"
  start_nginx "$instances"
  url=http://127.0.0.1:$nginx_port/api/v1/orders
}
down() {
  stop_nginx
  stop_instances
}

# check_sku SKU UNITS UNANSWERED EXPECT: GET status on every instance agrees with itself
# (sold = stock_total - remaining, no segment below 0) and with the others; then the 201 units
# against sold: EXPECT "exact" (= sold, nothing unanswered), "covered" (units <= sold <= units
# + unknown/unanswered allowance), or "loss" (report sold - units, never fail on it). Prints
# a line and sets $check_line; sets failed=1 on a violation.
check_sku() {
  local sku=$1 units=$2 slack=$3 expect=$4 i body t r s o neg prev=""
  for ((i = 0; i < instances; i++)); do
    body=$(curl -fsS --max-time 5 "http://127.0.0.1:${inst_ports[i]}/api/v1/skus/$sku?consistent=1") ||
      { log "✗ GET status on instance $i failed"; failed=1; return; }
    # stock_total remaining sold orders and the number of segments below 0
    read -r t r s o neg < <(python3 -c 'import json, sys
j = json.load(sys.stdin)
print(j["stock_total"], j["remaining"], j["sold"], j["orders"], sum(1 for g in j["segments"] if g["remaining"] < 0))' <<<"$body")
    if [ "$s" != $((t - r)) ] || [ "$neg" != 0 ] || [ "$o" != "$s" ]; then
      log "✗ $sku: instance $i: sold $s, stock_total $t, remaining $r, orders $o, negative $neg"
      failed=1
    fi
    if [ -n "$prev" ] && [ "$prev" != "$t/$r/$s/$o" ]; then
      log "✗ $sku: instances disagree ($prev vs $t/$r/$s/$o)"
      failed=1
    fi
    prev="$t/$r/$s/$o"
  done
  case "$expect" in
    exact) [ "$s" = "$units" ] || { log "✗ $sku: sold $s != 201 units $units"; failed=1; } ;;
    covered)
      if [ "$s" -lt "$units" ] || [ "$s" -gt $((units + slack)) ]; then
        log "✗ $sku: sold $s outside [201 units $units, + $slack unknown/unanswered]"
        failed=1
      fi ;;
  esac
  check_line="sold=$s units201=$units lost=$((units > s ? units - s : 0))"
  log "  $sku: stock_total $t remaining $r sold $s orders $o; 201 units $units ($check_line)"
}

# load PREFIX SKU WINDOW: wrk on $url for WINDOW seconds; sets $result.
load() {
  declare -gA o=([conns]=$conns [script]=order.lua [ok]=201)
  sku=$2
  drain_max=$(((lock_wait + 999) / 1000 + 3))
  start_wrk "$1" "$3"
  finish_wrk "$1"
}

# --- --bench -----------------------------------------------------------------------------------

bench_one() { # NAME ARGS...
  local name=$1; shift
  up "$@"
  local skun=bench-$name
  put_sku "$skun" 1000000000 "$segments" "$res/raw/$name.put"
  load "$res/raw/$name-warm" "$skun" 2
  local warm_units warm_unanswered
  warm_units=$(field units "$result")
  warm_unanswered=$(field unanswered "$result")
  local before after d rate total per
  before=$(cpu_of "$masters_ports")
  load "$res/raw/$name" "$skun" "${LT_WINDOW_S:-10}"
  after=$(cpu_of "$masters_ports")
  d=$(cpu_delta "$before" "$after")
  rate=$(field rate "$result")
  local created
  created=$(field created "$result")
  total=$(awk -v d="$d" 'BEGIN {n = split(d, a, " "); for (i = 1; i <= n; i++) s += a[i]; printf "%.3f", s}')
  per=$(awk -v t="$total" -v c="$created" 'BEGIN {printf "%.1f", c ? t * 1e6 / c : 0}')
  local permaster
  permaster=$(awk -v d="$d" -v c="$created" 'BEGIN {n = split(d, a, " "); for (i = 1; i <= n; i++) printf "%s%.1f", (i > 1 ? " / " : ""), c ? a[i] * 1e6 / c : 0}')
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$round" "$name" "$rate" "$(field p99_us "$result")" \
    "$per" "$permaster" "$(field s503 "$result")" >>"$report"
  log "bench $name: $rate orders/s, Redis CPU $per us/order ($permaster per master)"
  local unanswered=$(($(field unanswered "$result") + warm_unanswered))
  check_sku "$skun" $(($(field units "$result") + warm_units)) "$unanswered" \
    "$([ "$unanswered" = 0 ] && echo exact || echo covered)"
  down
}

bench() {
  {
    echo
    echo "## Orders/s and Redis CPU per order (3 instances behind nginx, wrk -t$wrk_threads -c$conns, $segments segments, hold 0, ${LT_WINDOW_S:-10} s, $rounds rounds)"
    echo
    echo "| round | Redis | orders/s | p99 µs | Redis CPU µs/order (all masters) | per master | 503 |"
    echo "|---|---|---|---|---|---|---|"
  } >>"$report"
  local round
  for ((round = 1; round <= rounds; round++)); do bench_round; done
}

bench_round() {
  redis_port=""
  start_redis
  redis_url="redis://127.0.0.1:$redis_port" masters_ports=$redis_port
  bench_one one-redis
  stop_redis
  one_node_cluster
  # The same cluster-mode server through redis:// (no routing in the client) and through
  # redis-cluster:// (CRC16, slot map, a connection per node): the routing layer's own cost.
  redis_url="redis://127.0.0.1:$redis_port" bench_one cluster-1-master-plain-url
  bench_one cluster-1-master
  stop_redis
  cluster_up 3 0
  bench_one cluster-3-masters
  cluster_down
  cluster_up 3 1
  bench_one cluster-3x2-acks0
  bench_one cluster-3x2-acks1 --redis-replica-acks 1
  cluster_down
}

# --- --failover and --reshard --------------------------------------------------------------------

# created_total: orders answered 201 so far by all instances (their /metrics: no Redis needed,
# so it answers while a master is down, unlike GET status).
created_total() {
  local i n=0 v
  for ((i = 0; i < instances; i++)); do
    v=$(curl -fsS --max-time 2 "http://127.0.0.1:${inst_ports[i]}/metrics" |
      sed -n 's/^inventory_orders_total{result="created"} \([0-9]*\)$/\1/p')
    n=$((n + ${v:-0}))
  done
  echo "$n"
}

# sample_sold FILE: every 0.5 s "t_ms created" into FILE, in the background.
sample_sold() {
  local file=$1
  (
    t0=$(date +%s%N)
    while :; do
      echo "$((($(date +%s%N) - t0) / 1000000)) $(created_total)" >>"$file"
      sleep 0.5
    done
  ) &
  extra_pids+=($!)
  sampler=$!
}

# rates FILE FROM_MS TO_MS: orders/s between two instants of a sold series.
rates() {
  awk -v a="$2" -v b="$3" '$2 != "?" { if ($1 <= a) { sa = $2; ta = $1 } if ($1 <= b) { sb = $2; tb = $1 } }
    END { if (tb > ta) printf "%.0f", (sb - sa) * 1000 / (tb - ta); else print "?" }' "$1"
}

failover_one() { # ACKS
  local acks=$1 window=${LT_WINDOW_S:-24}
  cluster_up 3 1 1
  up --redis-replica-acks "$acks" --lock-lease-ms 2000
  local skun=fo-acks$acks
  put_sku "$skun" 1000000000 "$segments" "$res/raw/$skun.put"
  # The victim: the master of segment 0.
  local slot vport s
  slot=$(redis-cli -p "${masters_ports%% *}" CLUSTER KEYSLOT "inv:2:{$skun/0}:stock")
  vport=$(slot_owner "${masters_ports%% *}" "$slot")
  [ -n "$vport" ] || die "no master for slot $slot"
  local nseg=0 k
  for ((k = 0; k < segments; k++)); do
    s=$(redis-cli -p "$vport" CLUSTER KEYSLOT "inv:2:{$skun/$k}:stock")
    [ "$(slot_owner "$vport" "$s")" = "$vport" ] && nseg=$((nseg + 1))
  done
  local series=$res/raw/$skun.sold
  : >"$series"
  sample_sold "$series"
  declare -gA o=([conns]=$conns [script]=order.lua [ok]=201)
  sku=$skun
  drain_max=$(((lock_wait + 999) / 1000 + 3))
  local t0 kill_ms promoted_ms back_ms
  t0=$(date +%s%N)
  start_wrk "$res/raw/$skun" "$window"
  sleep $((window / 4 - 1))
  # How far the replica trails its master under this load (the window of acks 0): 50 times,
  # SET a probe key (in a slot of the victim) on the master, then GET it on its replica until
  # it is there: the replication delay, measured on two connections of one process.
  local rport delays
  rport=$(redis-cli -p "$vport" INFO replication | tr -d '\r' | sed -n 's/^slave0:.*port=\([0-9]*\).*/\1/p')
  # The probe key carries segment 0's hash tag, so it is in a slot of the victim (with key
  # schema 1's tag {sku:0} it was not: the SET got MOVED and the GET loop never ended). Every
  # probe gives up after 2 s and every socket read after 5 s: then the delays are "? ? ?".
  delays=$(timeout 60 python3 - "$vport" "$rport" "{$skun/0}:probe" <<'PY'
import socket, sys, time
def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
def cmd(s, *args):
    s.sendall(b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]))
    buf = b""
    while not buf.endswith(b"\r\n") or (buf.startswith(b"$") and buf.count(b"\r\n") < 2 and not buf.startswith(b"$-1")):
        chunk = s.recv(4096)
        if not chunk:
            sys.exit(1)
        buf += chunk
    return buf
m, r, key = conn(sys.argv[1]), conn(sys.argv[2]), sys.argv[3].encode()
cmd(r, b"READONLY")
out = []
for i in range(50):
    v = b"%d" % (time.monotonic_ns() + i)
    if not cmd(m, b"SET", key, v).startswith(b"+OK"):
        sys.exit(1)
    t0 = time.monotonic_ns()
    while v not in cmd(r, b"GET", key):
        if time.monotonic_ns() - t0 > 2e9:
            sys.exit(1)
    out.append((time.monotonic_ns() - t0) / 1000)
    time.sleep(0.01)
out.sort()
print("%.0f %.0f %.0f" % (out[len(out) // 2], out[int(len(out) * 0.9)], out[-1]))
PY
  ) || delays="? ? ?"
  set -- $delays
  local rate_now
  rate_now=$(rates "$series" $(($(tail -1 "$series" | cut -d' ' -f1) - 2000)) 999999999)
  log "failover acks $acks: replication delay median $1 us, p90 $2 us, max $3 us (at ~$rate_now orders/s: ~$(awk -v d="$1" -v r="$rate_now" 'BEGIN {printf "%.1f", d * r / 1e6}') orders in flight to the replica at a time, cluster-wide)"
  lag_note="delay $1 / $2 / $3 µs (median / p90 / max)"
  kill -9 "$(node_pid "$vport")"
  kill_ms=$((($(date +%s%N) - t0) / 1000000))
  log "failover acks $acks: killed master :$vport ($nseg of $segments segments) at $kill_ms ms"
  local other
  for other in $masters_ports; do [ "$other" != "$vport" ] && break; done
  promoted_to() { local o; o=$(slot_owner "$other" "$slot"); [ -n "$o" ] && [ "$o" != "$vport" ]; }
  wait_until 300 promoted_to || die "slot $slot was not failed over"
  promoted_ms=$((($(date +%s%N) - t0) / 1000000))
  # The old master comes back (its nodes.conf) as a replica of the promoted one.
  CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" restart "$vport" >>"$res/logs/cluster.log" 2>&1 ||
    die "node $vport did not restart (see $cluster_dir/$vport/redis.log)"
  wait_until 300 bash -c "redis-cli -p $vport INFO replication | grep -q master_link_status:up" ||
    die "the old master did not come back as a replica"
  back_ms=$((($(date +%s%N) - t0) / 1000000))
  finish_wrk "$res/raw/$skun"
  stop_pid "$sampler" 10
  local end_ms=$((window * 1000))
  local r_before r_down r_promoted r_after
  r_before=$(rates "$series" 0 "$kill_ms")
  r_down=$(rates "$series" "$kill_ms" "$promoted_ms")
  r_promoted=$(rates "$series" "$promoted_ms" "$back_ms")
  r_after=$(rates "$series" "$back_ms" "$end_ms")
  log "failover acks $acks: orders/s before $r_before, master down $r_down, promoted $r_promoted, replica back $r_after"
  check_sku "$skun" "$(field units "$result")" \
    $(($(field unanswered "$result") + $(field s503_unknown "$result"))) \
    "$([ "$acks" = 1 ] && echo covered || echo loss)"
  printf '| %s | %s of %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s |\n' "$acks" "$nseg" "$segments" \
    "$r_before" "$r_down" "$r_promoted" "$r_after" "$kill_ms" "$promoted_ms" "$back_ms" \
    "$(field s503_unknown "$result")" "$check_line" "$lag_note" >>"$report"
  down
  cluster_down
}

failover() {
  {
    echo
    echo "## kill -9 of a master under load (3+3, min-replicas-to-write 1, ${LT_WINDOW_S:-24} s)"
    echo
    echo "| acks | victim's segments | orders/s before | master down | promoted, no replica yet | replica back | kill / promoted / back ms | 503 unknown | Redis vs 201s | replication delay before the kill |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
  } >>"$report"
  failover_one 1
  failover_one 0
}

reshard() {
  local window=${LT_WINDOW_S:-24}
  cluster_up 3 0
  up
  local skun=reshard
  put_sku "$skun" 1000000000 "$segments" "$res/raw/$skun.put"
  local a=${masters_ports%% *} rest=${masters_ports#* } b from to
  b=${rest%% *}
  from=$(redis-cli -p "$a" CLUSTER MYID)
  to=$(redis-cli -p "$b" CLUSTER MYID)
  local series=$res/raw/$skun.sold
  : >"$series"
  sample_sold "$series"
  declare -gA o=([conns]=$conns [script]=order.lua [ok]=201)
  sku=$skun
  drain_max=$(((lock_wait + 999) / 1000 + 3))
  local t0 s_ms e_ms
  t0=$(date +%s%N)
  start_wrk "$res/raw/$skun" "$window"
  sleep 3
  s_ms=$((($(date +%s%N) - t0) / 1000000))
  local n
  n=$(slots_of "$a")
  redis-cli --cluster reshard "127.0.0.1:$a" --cluster-from "$from" --cluster-to "$to" \
    --cluster-slots "$n" --cluster-yes >"$res/logs/reshard.log" 2>&1 ||
    { log "✗ redis-cli --cluster reshard failed (see $res/logs/reshard.log)"; failed=1; }
  e_ms=$((($(date +%s%N) - t0) / 1000000))
  finish_wrk "$res/raw/$skun"
  stop_pid "$sampler" 10
  local left r_before r_during r_after
  left=$(slots_of "$a")
  r_before=$(rates "$series" 0 "$s_ms")
  r_during=$(rates "$series" "$s_ms" "$e_ms")
  r_after=$(rates "$series" "$e_ms" $((window * 1000)))
  log "reshard: every slot of :$a moved to :$b in $((e_ms - s_ms)) ms under load ($left slots left on :$a); orders/s before $r_before, during $r_during, after $r_after"
  check_sku "$skun" "$(field units "$result")" \
    $(($(field unanswered "$result") + $(field s503_unknown "$result"))) covered
  local line="moved in $((e_ms - s_ms)) ms; orders/s before $r_before, during $r_during, after $r_after;"
  line+=" $(field s503 "$result") answers 503 ($(field s503_unknown "$result") outcome unknown); $check_line"
  printf '\n## redis-cli --cluster reshard under load (3 masters; every slot of one master moved)\n\n%s\n' \
    "$line" >>"$report"
  down
  cluster_down
}

routing() {
  {
    echo
    echo "## The routing layer's cost (one instance, --threads 1, wrk -t1 -c16 direct, a one-node cluster)"
    echo
    echo "| round | URL | orders/s | inventoryd CPU µs/order |"
    echo "|---|---|---|---|"
  } >>"$report"
  redis_port=""
  one_node_cluster
  local round u kind t0 t1 tk n
  tk=$(getconf CLK_TCK)
  instances=1
  for ((round = 1; round <= (rounds > 3 ? rounds : 3); round++)); do
    for kind in plain cluster; do
      [ "$kind" = plain ] && u="redis://127.0.0.1:$redis_port" || u="redis-cluster://127.0.0.1:$redis_port"
      pick_instance_ports
      redis_url_override=$u
      start_servers inventoryd 1 1 --hold-ms 0
      put_sku "routing-$round-$kind" 1000000000 "$segments" "$res/raw/routing.put"
      url=http://127.0.0.1:${inst_ports[0]}/api/v1/orders
      t0=$(awk '{print $14 + $15}' "/proc/${inst_pids[0]}/stat")
      declare -gA o=([conns]=16 [script]=order.lua [ok]=201)
      sku=routing-$round-$kind
      drain_max=$(((lock_wait + 999) / 1000 + 3))
      wrk_threads=1 start_wrk "$res/raw/routing-$round-$kind" "${LT_WINDOW_S:-6}"
      wrk_threads=1 finish_wrk "$res/raw/routing-$round-$kind"
      t1=$(awk '{print $14 + $15}' "/proc/${inst_pids[0]}/stat")
      n=$(field created "$result")
      printf '| %s | %s | %s | %s |\n' "$round" "${u%%:*}://" "$(field rate "$result")" \
        "$(awk -v a="$t0" -v b="$t1" -v tk="$tk" -v n="$n" 'BEGIN {printf "%.1f", n ? (b - a) / tk * 1e6 / n : 0}')" >>"$report"
      stop_instances
    done
  done
  instances=3
  stop_redis
}

for m in $modes; do "$m"; done
log "report: $report"
cat "$report"
[ "$failed" = 0 ] || { log "INVARIANT VIOLATED"; exit 1; }
