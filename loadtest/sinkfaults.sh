#!/usr/bin/env bash
# The order log's fault tests (issue 21, SPEC §12; docs/reliability.md "The order log under
# faults"). Each fault runs under a sale through nginx in front of 3 inventoryd instances with
# --order-log, on two SKUs: one of instant orders (16 segments, wrk + loadtest/order.lua) and one
# with holds (4 segments, reservation_ttl_s 1 or 2, wrk + loadtest/hold.lua: of every three holds
# one is confirmed, one cancelled, one left to expire), while inventory-sink moves the log into a
# real MariaDB (mariadbd on a free port, its own data directory, started here). After each fault:
# every hold has ended, the sink has caught up (Redis: every stream's group has nothing pending
# and has delivered its last entry; the sink's /metrics: inventory_sink_lag_seconds 0 and
# inventory_sink_pending 0), then for each SKU `inventory-sink reconcile --sku S` must exit 0
# (the database equals Redis: no order missing, none doubled, every status the latest) and
# loadtest/verify.sh's SPEC §8 checks must pass (with the instant SKU's 201s counted by wrk).
# The faults, one run each:
#   sinkkill   kill -9 of the sink while it holds entries read but not acknowledged (mid-batch),
#              restarted under the same --consumer name (it re-reads its own pending entries)
#   dbkill     kill -9 of mariadbd mid-sale, restarted from its data directory (InnoDB recovery)
#              after 3 s (long: 10 s); the sink retries with back-off
#   dbslow     the database slow: the sink reaches MariaDB through loadtest/delayproxy with
#              833 ms each way, so each transaction (INSERT, upsert, COMMIT: 3 round trips)
#              takes 5 s; at the end of the sale the database recovers (the proxy restarted
#              without delay: the sink's connection drops, a commit may be cut off unanswered)
#   instkill   kill -9 of an inventoryd while it is inside critical sections (mid-order; the
#              instances hold each segment lock 5 ms, --hold-ms 5), restarted 2 s later
#   failover   a Redis Cluster of 3 masters + 3 replicas (min-replicas-to-write 1), the
#              instances with --redis-replica-acks 1: kill -9 of the master of the instant SKU's
#              segment 0, its replica promoted, the old master back as a replica
#   twosinks   two sinks at once (two consumers of the group); 2/3 into the sale the second is
#              killed -9 while entries are pending for it, and not restarted: the first must
#              claim them (XAUTOCLAIM, --claim-idle-ms 3000; inventory_sink_claimed_total)
# Measured, reported in SUMMARY.md, not asserted: the order rate, the sink's throughput
# (events/s committed into MariaDB, during the sale and its best second; the catch-up rate after
# an outage), the lag during the sale (max of inventory_sink_lag_seconds sampled every 250 ms;
# the sinks run with --maintain-ms 250 so the gauge is that fresh).
# Writes loadtest/results/sinkfaults-<UTC timestamp>[-short]/ with SUMMARY.md, run.log, raw/
# (wrk output, metric samples, reconcile and verify output) and logs/; MariaDB's data directory
# (run/mariadb) only when a check failed. Everything it starts is stopped on exit, also on
# failure.
#
# Usage: loadtest/sinkfaults.sh [--short] [--faults LIST] [--out DIR]
#   --short    4 s of sale per fault (about 1.5 min in all); default: 30 s per fault, the
#              outages repeated (sink kill every 8 s, database kill every 12 s, instance kill
#              every 10 s), about 9 min
#   --faults   comma-separated subset of sinkkill,dbkill,dbslow,instkill,failover,twosinks [all]
#   --out DIR  results directory
# Exit status: 0 every check passed; 1 a check failed; 2 usage; 3 infrastructure failure.
#
# Env (all optional): BUILD_DIR (build), LT_SKIP_BUILD=1, LT_SKIP_DEPS=1, SF_WINDOW_S (4; long
# 30), SF_CONNECTIONS (32, instant SKU; the holds SKU gets a quarter), SF_SLOW_COMMIT_MS (5000),
# SF_CATCHUP_S (how long the sink may take to catch up after a fault: 120; long 300),
# LT_PORT_MIN/MAX.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest

short=0 faults="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=1; shift ;;
    --faults) faults=$2; shift 2 ;;
    --faults=*) faults=${1#*=}; shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sinkfaults.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
all_faults=sinkkill,dbkill,dbslow,instkill,failover,twosinks
faults=${faults:-$all_faults}
for f in ${faults//,/ }; do
  [[ ",$all_faults," == *",$f,"* ]] || { echo "sinkfaults.sh: unknown fault '$f' (one of $all_faults)" >&2; exit 2; }
done

build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=$build_dir/bin/inventoryd
sink_bin=$build_dir/bin/inventory-sink
proxy_bin=$build_dir/bin/delayproxy
instances=3
port_min=${LT_PORT_MIN:-20000}
port_max=${LT_PORT_MAX:-32000}
wrk_threads=1
conns=${SF_CONNECTIONS:-32}
hconns=$(((conns + 3) / 4))
lock_wait=2000
lease=2000
if [ "$short" = 1 ]; then window=${SF_WINDOW_S:-4}; else window=${SF_WINDOW_S:-30}; fi
slow_commit_ms=${SF_SLOW_COMMIT_MS:-5000}
if [ "$short" = 1 ]; then catchup_s=${SF_CATCHUP_S:-120}; else catchup_s=${SF_CATCHUP_S:-300}; fi
stock=100000000 segments=16 hsegments=4 qty=1

stamp=$(date -u +%Y%m%dT%H%M%SZ)
res=${out:-$lt/results/sinkfaults-$stamp$([ "$short" = 1 ] && echo -short || true)}
mkdir -p "$res/raw" "$res/logs"
run_dir=$res/run
mkdir -p "$run_dir"
lib_name=sinkfaults
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

obs_pids=() sink_pids=() sink_ports=() sink_names=() wrk_pids=() all_passed=0
mdb_pid="" mdb_port="" slowproxy_pid=""
# "index port" of each sink started in this fault, for the sampler (a background loop).
sinks_file=$run_dir/sinks
: >"$sinks_file"
mdb_dir=$run_dir/mariadb
# The socket path must stay short (108 bytes): not under $res.
mdb_sock=$(mktemp -u /tmp/sinkfaults-mdb-XXXXXX.sock)
cleanup_hook() {
  [ -z "${stop_file:-}" ] || touch "$stop_file"
  local p
  for p in ${obs_pids[@]+"${obs_pids[@]}"} ${wrk_pids[@]+"${wrk_pids[@]}"}; do stop_pid "$p" 20; done
  for p in ${sink_pids[@]+"${sink_pids[@]}"}; do stop_pid "$p" 50; done
  stop_pid "$slowproxy_pid" 20
  mdb_stop
  rm -f "$mdb_sock"
  # The database's files (hundreds of MB) are kept only when a check failed.
  [ "$all_passed" != 1 ] || rm -rf "${mdb_dir:?}"
}
install_cleanup

[ "${LT_SKIP_DEPS:-0}" = 1 ] || "$root/scripts/deps.sh"
check_tools
for tool in mariadbd mariadb-install-db mariadb python3; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] ||
    die "$tool is not installed (scripts/deps.sh installs mariadb-server)"
done
[ "${LT_SKIP_BUILD:-0}" = 1 ] || build_targets inventoryd inventory-sink delayproxy
for b in "$bin" "$sink_bin" "$proxy_bin"; do [ -x "$b" ] || die "no binary at $b"; done
pick_instance_ports

now_ms() { date +%s%3N; }
failures=0 checks_passed=0 row_checks=""
# check DESCRIPTION CONDITION...: runs the condition; logs ✓ or ✗ and counts it.
check() {
  local what=$1; shift
  if "$@"; then
    log "  ✓ $what"; checks_passed=$((checks_passed + 1))
  else
    log "  ✗ $what"; failures=$((failures + 1)); row_checks+="✗ $what; "
  fi
}
ge() { [ "$1" -ge "$2" ]; }
eq() { [ "$1" -eq "$2" ]; }

# --- MariaDB ----------------------------------------------------------------------------------

mdb_root_flag=()
[ "$(id -u)" != 0 ] || mdb_root_flag=(--user=root)
mdb_sql() { timeout 20 mariadb --connect-timeout=5 -h 127.0.0.1 -P "$mdb_port" -u root -N -B "$@"; }
mdb_ours() { [ "$(mdb_sql -e 'SELECT @@datadir' 2>/dev/null)" = "$mdb_dir/data/" ]; }
# mdb_launch: mariadbd on $mdb_port (its data directory $mdb_dir/data); 0 once it answers.
mdb_launch() {
  "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --no-defaults --datadir="$mdb_dir/data" \
    --skip-networking=0 --bind-address=127.0.0.1 --port="$mdb_port" --socket="$mdb_sock" \
    --log-error="$res/logs/mariadb.log" --pid-file="$mdb_dir/mariadbd.pid" \
    --innodb-buffer-pool-size=64M --skip-name-resolve ${mdb_root_flag[@]+"${mdb_root_flag[@]}"} \
    >>"$res/logs/mariadb.log" 2>&1 &
  mdb_pid=$!
  wait_ready "$mdb_pid" 600 mdb_ours
}
mdb_stop() { stop_pid "$mdb_pid" 200; mdb_pid=""; }
# mdb_start: a new data directory (mariadb-install-db), the server, the sink's database and user
# with the privileges docs/deployment.md lists; sets db_url.
mdb_start() {
  mkdir -p "$mdb_dir"
  mariadb-install-db --no-defaults --datadir="$mdb_dir/data" --auth-root-authentication-method=normal \
    --skip-test-db ${mdb_root_flag[@]+"${mdb_root_flag[@]}"} >"$res/logs/mariadb-install.log" 2>&1 ||
    die "mariadb-install-db failed (see $res/logs/mariadb-install.log)"
  local attempt
  for attempt in 1 2 3; do
    pick_port || die "no free port for MariaDB"
    mdb_port=$picked
    mdb_launch && break
    mdb_stop
    [ "$attempt" -lt 3 ] || die "mariadbd did not start (see $res/logs/mariadb.log)"
  done
  db_pass=sf-$RANDOM$RANDOM
  mdb_sql -e "CREATE DATABASE shop; CREATE USER 'sink'@'127.0.0.1' IDENTIFIED BY '$db_pass';
    GRANT SELECT, INSERT, UPDATE, CREATE ON shop.* TO 'sink'@'127.0.0.1';" ||
    die "could not create the sink's database and user"
  db_url=mysql://sink:$db_pass@127.0.0.1:$mdb_port/shop
  log "MariaDB $(mdb_sql -e 'SELECT VERSION()') on port $mdb_port (data in $mdb_dir/data)"
}
# mdb_restart: the same data directory and port again (a killed server: crash recovery).
mdb_restart() {
  local attempt
  for attempt in 1 2 3 4 5; do
    mdb_launch && return 0
    mdb_stop
    sleep 0.5
  done
  die "mariadbd did not restart (see $res/logs/mariadb.log)"
}

# --- Redis: one server, or a cluster for the failover -----------------------------------------

cluster_mode=0
# a_port: a Redis node that answers (the single server, or any live cluster node).
a_port() {
  local p
  if [ "$cluster_mode" = 0 ]; then echo "$redis_port"; return; fi
  for p in $cluster_ports; do
    [ "$(timeout 2 redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && { echo "$p"; return; }
  done
  echo "${cluster_ports%% *}"
}
# rc CMD...: redis-cli --raw on any node, following MOVED (-c) on a cluster.
rc() { timeout 5 redis-cli -c -p "$(a_port)" --raw "$@"; }
redis_sink_url() {
  if [ "$cluster_mode" = 1 ]; then echo "$redis_url"; else echo "redis://127.0.0.1:$redis_port"; fi
}

# --- the sinks --------------------------------------------------------------------------------

# sink_start I DB_URL: sink I (consumer sf-<fault>-I, kept across restarts), /metrics on its
# port; the database URL (it holds the password) through the environment, not the command line.
sink_start() {
  local i=$1 url=$2 attempt
  sink_names[i]=sf-$fname-$i
  for attempt in 1 2 3; do
    if [ -z "${sink_ports[i]:-}" ] || [ "$attempt" -gt 1 ]; then
      pick_port || die "no free port for sink $i"; sink_ports[i]=$picked
    fi
    sed -i "/^$i /d" "$sinks_file"; echo "$i ${sink_ports[i]}" >>"$sinks_file"
    INVENTORY_SINK_DB_URL=$url "$sink_bin" --redis "$(redis_sink_url)" --metrics-port "${sink_ports[i]}" \
      --consumer "${sink_names[i]}" --maintain-ms 250 --claim-idle-ms 3000 --log-level info \
      2>>"$res/logs/sink-$fname-$i.log" &
    sink_pids[i]=$!
    wait_ready "${sink_pids[i]}" 100 curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:${sink_ports[i]}/metrics" && return 0
    stop_pid "${sink_pids[i]}" 20
  done
  die "inventory-sink $i did not start (see $res/logs/sink-$fname-$i.log)"
}
sink_alive() { [ -n "${sink_pids[$1]:-}" ] && kill -0 "${sink_pids[$1]}" 2>/dev/null; }
# sink_metric I NAME: the value of a /metrics line of sink I ("NAME VALUE", NAME may carry
# labels), or -1.
sink_metric() {
  curl -fsS --max-time 2 "http://127.0.0.1:${sink_ports[$1]}/metrics" 2>/dev/null |
    awk -v n="$2" '$1 == n { v = $2 } END { print (v == "" ? -1 : v) }'
}
sink_health() { curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:${sink_ports[$1]}/healthz" 2>/dev/null || true; }
sinks_stop() {
  local i
  for ((i = 0; i < ${#sink_pids[@]}; i++)); do stop_pid "${sink_pids[i]}" 50; done
  sink_pids=() sink_ports=() sink_names=()
  : >"$sinks_file"
}

# --- observers --------------------------------------------------------------------------------

# sampler OUT: every 250 ms, per sink that answers, "ms sink written lag pending batches".
sampler() {
  local i m t port
  while [ ! -e "$stop_file" ]; do
    t=$(now_ms)
    while read -r i port; do
      m=$(curl -fsS --max-time 1 "http://127.0.0.1:$port/metrics" 2>/dev/null) || continue
      awk -v t="$t" -v i="$i" '$1 == "inventory_sink_events_written_total" { w = $2 }
        $1 == "inventory_sink_lag_seconds" { l = $2 } $1 == "inventory_sink_pending" { p = $2 }
        $1 == "inventory_sink_batches_total" { b = $2 }
        END { if (w != "") print t, i, w, l, p, b }' <<<"$m" >>"$1"
    done <"$sinks_file"
    sleep 0.25
  done
}
observers_start() {
  stop_file=$raw.stop
  rm -f "$stop_file"
  : >"$raw.samples"
  sampler "$raw.samples" & obs_pids+=($!)
}
observers_stop() {
  touch "$stop_file"
  local p
  for p in ${obs_pids[@]+"${obs_pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  obs_pids=()
}
# written_between T0 T1: events committed by all sinks between two instants (a restarted sink's
# counter starts again at 0: counted from there).
written_between() {
  awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b {
      if (($2) in last) { d = $3 - last[$2]; if (d < 0) d = $3; n += d } last[$2] = $3 }
    END { print n + 0 }' "$raw.samples"
}
# best_second T0 T1: the most events committed (all sinks) in one second between two instants.
best_second() {
  awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b {
      if (($2) in last) { d = $3 - last[$2]; if (d < 0) d = $3; s = int(($1 - a) / 1000); c[s] += d }
      last[$2] = $3 }
    END { m = 0; for (k in c) if (c[k] > m) m = c[k]; print m + 0 }' "$raw.samples"
}
# max_lag T0 T1: the largest inventory_sink_lag_seconds sampled between two instants.
max_lag() {
  awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b && $4 > m { m = $4 } END { printf "%.2f", m + 0 }' "$raw.samples"
}

# --- the sale -----------------------------------------------------------------------------------

# fault_begin NAME TTL [inventoryd flags...]: Redis (or the cluster when cluster_mode=1), 3
# instances with --order-log, nginx, the two SKUs preheated (holds of TTL seconds).
fault_begin() {
  fname=$1; local ttl=$2; shift 2
  raw=$res/raw/$fname
  sku_i=sf-$fname-i sku_h=sf-$fname-h
  log "fault $fname"
  if [ "$cluster_mode" = 1 ]; then
    cluster_up 3 1 1
    redis_url_override=$redis_url
    log "  Redis Cluster: masters $masters_ports (nodes $cluster_ports)"
  else
    start_redis
  fi
  start_servers inventoryd "$instances" 2 --order-log --lock-lease-ms "$lease" "$@"
  inst_flags=(--order-log --lock-lease-ms "$lease" "$@")
  start_nginx "$instances"
  put_sku "$sku_i" "$stock" "$segments" "$raw.put-i.json"
  local try
  for try in 1 2 3 4 5; do
    curl -fsS --max-time 10 -X PUT -H 'Content-Type: application/json' \
      -d "{\"stock\": $stock, \"segments\": $hsegments, \"reservation_ttl_s\": $ttl}" \
      "http://127.0.0.1:${inst_ports[0]}/api/v1/skus/$sku_h" >"$raw.put-h.json" 2>>"$res/logs/curl.log" && break
    [ "$try" -lt 5 ] || die "preheat PUT of $sku_h failed"
    sleep 0.5
  done
  hold_ttl=$ttl
}
fault_end() {
  sinks_stop
  stop_nginx
  stop_instances
  if [ "$cluster_mode" = 1 ]; then cluster_down; redis_url_override=""; else stop_redis; fi
  rm -rf "${run_dir:?}"/appendonlydir "$run_dir"/*.rdb
}

# wrk_go PREFIX SKU SCRIPT CONNS: wrk through nginx for $window seconds, in the background.
wrk_go() {
  local drain=$1.drain
  rm -rf "$drain"; mkdir -p "$drain"
  LT_SKU=$2 LT_QTY=$qty LT_WINDOW_S=$window LT_OK=201 LT_DRAIN_DIR=$drain \
    wrk -t "$wrk_threads" -c "$4" -d "$((window + 8))s" --timeout 10s --latency \
    -s "$lt/$3" "http://127.0.0.1:$nginx_port/api/v1/orders" >"$1.wrk.txt" 2>"$1.wrk.stderr" &
  wrk_pids+=($!)
}
drained() { [ "$(find "$1.drain" -name 'thread-*' | wc -l)" -ge "$wrk_threads" ]; }
sale_start() {
  wrk_pids=()
  wrk_go "$raw-i" "$sku_i" order.lua "$conns"
  wrk_go "$raw-h" "$sku_h" hold.lua "$hconns"
  load_t0=$(now_ms)
}
load_end_ms() { echo $((load_t0 + window * 1000)); }
sleep_until() {
  local d=$(($1 - $(now_ms)))
  [ "$d" -le 0 ] || sleep "$(awk -v d="$d" 'BEGIN { print d / 1000 }')"
}
# sale_finish: both wrk have every answer (or ran out of time); sets result_i, result_h.
sale_finish() {
  sleep_until "$(load_end_ms)"
  local p rc=0
  wait_until 100 drained "$raw-i" || true
  wait_until 100 drained "$raw-h" || true
  for p in "${wrk_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${wrk_pids[@]}"; do wait "$p" || rc=$?; done
  wrk_pids=()
  result_i=$(grep '^RESULT ' "$raw-i.wrk.txt" | tail -1 || true)
  result_h=$(grep '^RESULT ' "$raw-h.wrk.txt" | tail -1 || true)
  [ -n "$result_i" ] && [ -n "$result_h" ] || die "wrk failed (exit $rc; $raw-i.wrk.txt, $raw-h.wrk.txt)"
  rm -rf "$raw-i.drain" "$raw-h.drain"
}

# --- after the sale -------------------------------------------------------------------------------

metric() {
  curl -fsS --max-time 2 "http://127.0.0.1:${inst_ports[$1]}/metrics" 2>/dev/null |
    awk -v n="$2" '$1 == n { v = $2 } END { print (v == "" ? -1 : v) }'
}
# locks_clear: no segment lock of either SKU is held.
locks_clear() {
  local k
  for ((k = 0; k < segments; k++)); do [ "$(rc EXISTS "inv:2:{$sku_i/$k}:lock")" = 0 ] || return 1; done
  for ((k = 0; k < hsegments; k++)); do [ "$(rc EXISTS "inv:2:{$sku_h/$k}:lock")" = 0 ] || return 1; done
}
quiet() {
  local i
  for ((i = 0; i < ${#inst_pids[@]}; i++)); do
    kill -0 "${inst_pids[i]}" 2>/dev/null || continue
    [ "$(metric "$i" inventory_requests_in_flight)" -le 1 ] || return 1
  done
  locks_clear
}
# holds_ended: every hold of the holds SKU is confirmed, cancelled or expired (due sets empty).
holds_ended() {
  local k
  for ((k = 0; k < hsegments; k++)); do [ "$(rc ZCARD "inv:2:{$sku_h/$k}:due")" = 0 ] || return 1; done
}
# streams: the log streams of the fault's SKUs.
streams() {
  local k
  for ((k = 0; k < segments; k++)); do echo "inv:2:{$sku_i/$k}:log"; done
  for ((k = 0; k < hsegments; k++)); do echo "inv:2:{$sku_h/$k}:log"; done
}
# group_pending: entries of the fault's streams read by a sink and not yet acknowledged (Redis).
group_pending() {
  local key n=0 p
  if [ "$cluster_mode" = 0 ]; then # one pipelined call
    streams | sed 's/^/XINFO GROUPS /' | timeout 5 redis-cli -p "$redis_port" --raw 2>/dev/null |
      awk 'prev == "pending" { n += $0 } { prev = $0 } END { print n + 0 }' || echo 0
    return
  fi
  for key in $(streams); do
    p=$(rc XINFO GROUPS "$key" | awk 'prev == "pending" { print; exit } { prev = $0 }') || p=0
    n=$((n + ${p:-0}))
  done
  echo "$n"
}
pending_now() { [ "$(group_pending)" -gt 0 ]; }
# consumer_pending NAME: entries of the fault's streams pending for consumer NAME (one Redis).
consumer_pending() {
  streams | sed 's/^/XPENDING /; s/$/ sink/' | timeout 5 redis-cli -p "$redis_port" --raw 2>/dev/null |
    awk -v c="$1" 'prev == c { n += $0 } { prev = $0 } END { print n + 0 }' || echo 0
}
consumer_pending_now() { [ "$(consumer_pending "$1")" -gt 0 ]; }
# redis_drained: in Redis, for every stream of the fault's SKUs, the group "sink" has nothing
# pending and has delivered the stream's last entry.
redis_drained() {
  local key g last
  for key in $(streams); do
    g=$(rc XINFO GROUPS "$key") || return 1
    last=$(rc XINFO STREAM "$key" | awk 'prev == "last-generated-id" { print; exit } { prev = $0 }') || return 1
    awk -v last="$last" '
      prev == "name" { ours = ($0 == "sink") }
      ours && prev == "pending" { pend = $0 }
      ours && prev == "last-delivered-id" { ld = $0 }
      { prev = $0 }
      END { exit !(pend == "0" && ld == last) }' <<<"$g" || return 1
  done
}
# sinks_drained: every live sink's gauges say lag 0 and nothing pending.
sinks_drained() {
  local i
  for ((i = 0; i < ${#sink_pids[@]}; i++)); do
    sink_alive "$i" || continue
    [ "$(sink_metric "$i" inventory_sink_pending)" = 0 ] || return 1
    [ "$(sink_metric "$i" inventory_sink_lag_seconds)" = 0 ] || return 1
  done
}
caught_up() { redis_drained && sinks_drained; }

# settle_and_check: waits until no order is in flight, every hold has ended and
# the sink has caught up, then reconcile and verify.sh for both SKUs; sets catchup_ms, fault_ok.
settle_and_check() {
  local t0
  wait_until $(((lock_wait + lease) / 100 + 300)) quiet || log "  (not quiet: requests in flight or segment locks held)"
  wait_until $((hold_ttl * 10 + 100)) holds_ended || log "  (holds still due $((hold_ttl + 10)) s after the sale)"
  t0=$(now_ms)
  if wait_until $((catchup_s * 10)) caught_up; then
    t_caught=$(now_ms)
    catchup_ms=$((t_caught - t0))
    check "the sink caught up $catchup_ms ms after the sale had settled (Redis: nothing pending, last entry delivered; /metrics: lag 0, pending 0)" true
  else
    catchup_ms=-1 t_caught=$(now_ms)
    check "the sink caught up within $catchup_s s (pending in Redis: $(group_pending))" false
  fi
  local s rc url
  url=$(redis_sink_url)
  for s in "$sku_i" "$sku_h"; do
    rc=0
    INVENTORY_SINK_DB_URL=$db_url timeout 60 "$sink_bin" reconcile --redis "$url" --sku "$s" \
      >"$raw.reconcile-$s.txt" 2>"$raw.reconcile-$s.err" || rc=$?
    sed 's/^/    /' "$raw.reconcile-$s.txt" | head -20 >&2
    check "reconcile --sku $s: exit $rc ($(tail -1 "$raw.reconcile-$s.err" 2>/dev/null))" eq "$rc" 0
  done
  # verify.sh: the instant SKU against wrk's 201s (unknown outcomes bound it), the holds SKU
  # structurally (its 201s are holds that later ended).
  local vargs=(--redis-port "$(a_port)")
  [ "$cluster_mode" = 0 ] || vargs=(--redis-cluster "$redis_url")
  local units orders amb
  units=$(field units "$result_i"); orders=$(field created "$result_i")
  amb=$(($(field unanswered "$result_i") + $(field s503_unknown "$result_i") + $(field s5xx "$result_i")))
  rc=0
  "$lt/verify.sh" "${vargs[@]}" --sku "$sku_i" --stock-total "$stock" --units "$units" \
    --orders "$orders" --unanswered "$amb" --max-qty "$qty" >"$raw.verify-i.txt" 2>&1 || rc=$?
  grep -v '✓' "$raw.verify-i.txt" | sed 's/^/    /' >&2 || true
  check "SPEC §8 invariants of $sku_i ($(field sold "$(grep '^VERIFY' "$raw.verify-i.txt")") sold; wrk: $units units in 201s, $amb unknown outcomes)" eq "$rc" 0
  rc=0
  "$lt/verify.sh" "${vargs[@]}" --sku "$sku_h" --stock-total "$stock" >"$raw.verify-h.txt" 2>&1 || rc=$?
  grep -v '✓' "$raw.verify-h.txt" | sed 's/^/    /' >&2 || true
  local vh; vh=$(grep '^VERIFY' "$raw.verify-h.txt" || true)
  check "SPEC §8 invariants of $sku_h (holds: $(field orders "$vh") live, $(field ended "$vh") ended)" eq "$rc" 0
}

# --- the report ----------------------------------------------------------------------------------

{
  echo "# Order log under faults ($([ "$short" = 1 ] && echo "--short" || echo "long"): $window s of sale per fault)"
  echo
  echo "Started $stamp on $(nproc) cores ($(uptime | sed 's/.*load average/load average/')). 3 inventoryd (--order-log) behind nginx;"
  echo "SKU \`-i\`: instant orders, $segments segments, wrk $conns connections (order.lua); SKU \`-h\`:"
  echo "holds, $hsegments segments, wrk $hconns connections (hold.lua: 1/3 confirmed, 1/3 cancelled, 1/3 expire)."
  echo "inventory-sink --batch 500 --maintain-ms 250 --claim-idle-ms 3000 into MariaDB $(mariadbd --version 2>/dev/null | awk '{print $3}')."
  echo
  echo "| fault | result | orders/s (instant + holds) | events written/s during the sale (best second) | max lag during the sale (s) | after the sale: events/s written until caught up | caught up after the sale settled | notes |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$res/SUMMARY.md"
# report NAME NOTES: the fault's row.
report() {
  local verdict=pass rate_i rate_h wr best lag drain
  [ -z "$row_checks" ] || verdict="FAIL: ${row_checks%; }"
  rate_i=$(field rate "$result_i")
  rate_h=$(awk -v c="$(field created "$result_h")" -v w="$window" 'BEGIN { printf "%.0f", c / w }')
  wr=$(awk -v n="$(written_between "$load_t0" "$(load_end_ms)")" -v w="$window" 'BEGIN { printf "%.0f", n / w }')
  best=$(best_second "$load_t0" "$(load_end_ms)")
  lag=$(max_lag "$load_t0" "$(load_end_ms)")
  drain=$(awk -v n="$(written_between "$(load_end_ms)" "$t_caught")" -v t=$((t_caught - $(load_end_ms))) \
    'BEGIN { if (t > 0) printf "%.0f (%d in %.1f s)", n * 1000 / t, n, t / 1000; else print "-" }')
  printf '| %s | %s | %.0f + %s | %s (%s) | %s | %s | %s ms | %s |\n' "$1" "$verdict" "$rate_i" "$rate_h" \
    "$wr" "$best" "$lag" "$drain" "$catchup_ms" "$2" >>"$res/SUMMARY.md"
  row_checks=""
}
# repeat_times FIRST PERIOD: the instants (ms) of the fault: FIRST s into the sale, and in the
# long mode every PERIOD s while 4 s of sale are left after it.
repeat_times() {
  local t=$1
  echo $((load_t0 + t * 1000))
  [ "$short" = 0 ] || return 0
  while [ $((t + $2 + 4)) -le "$window" ]; do t=$((t + $2)); echo $((load_t0 + t * 1000)); done
}

# --- the faults -------------------------------------------------------------------------------------

fault_sinkkill() {
  fault_begin sinkkill 1
  sink_start 0 "$db_url"
  observers_start
  sale_start
  local t kills=0 left="" dups=0 p
  local try
  for t in $(repeat_times $((window / 2)) 8); do
    sleep_until "$t"
    # Mid-batch: entries read and not acknowledged (Redis says so), then kill -9 at once. The
    # sink may have acknowledged them in between: then it is restarted and killed again (at
    # most 5 times).
    for try in 1 2 3 4 5; do
      wait_until 30 pending_now || true
      kill -KILL "${sink_pids[0]}"; wait "${sink_pids[0]}" 2>/dev/null || true
      p=$(group_pending)
      left+="${left:+, }$p"
      kills=$((kills + 1))
      log "  kill -9 of the sink with $p entries read and not acknowledged"
      [ "$p" -gt 0 ] && break
      sink_start 0 "$db_url"
      sleep 0.3
    done
    sleep 1
    sink_start 0 "$db_url"
  done
  sale_finish
  settle_and_check
  observers_stop
  dups=$(sink_metric 0 inventory_sink_events_duplicate_total)
  local maxleft; maxleft=$(tr ',' '\n' <<<"$left" | sort -n | tail -1)
  check "at least one kill hit the sink mid-batch (entries pending in Redis after the kill: $left)" ge "${maxleft:-0}" 1
  report "kill -9 of the sink mid-batch ×$kills, restarted (same consumer)" \
    "pending after each kill: $left; the last restarted sink re-wrote $dups events already in the database (absorbed)"
  fault_end
}

fault_dbkill() {
  fault_begin dbkill 2
  sink_start 0 "$db_url"
  observers_start
  sale_start
  local t kills=0 outage=3 codes="" e0 e1
  [ "$short" = 1 ] || outage=10
  e0=$(sink_metric 0 'inventory_sink_errors_total{kind="db"}')
  local t_down downs=()
  for t in $(repeat_times $((window / 3)) 12); do
    sleep_until "$t"
    kill -KILL "$mdb_pid"; wait "$mdb_pid" 2>/dev/null || true; mdb_pid=""
    t_down=$(now_ms)
    log "  kill -9 of mariadbd"
    sleep 1
    codes+="${codes:+, }$(sink_health 0)"
    sleep $((outage - 1))
    downs+=("$t_down:$(now_ms)")
    mdb_restart
    kills=$((kills + 1))
    log "  mariadbd back (crash recovery) after ${outage}+ s"
  done
  sale_finish
  t=$(now_ms)
  e1=$(sink_metric 0 'inventory_sink_errors_total{kind="db"}')
  settle_and_check
  observers_stop
  check "the sink saw the database go ($((e1 - e0)) database errors; /healthz during the outages: $codes)" \
    test $((e1 - e0)) -ge 1 -a "${codes//[, ]/}" = "$(printf '503%.0s' $(seq "$kills"))"
  # The lag gauge is the alarm: it must grow while the database is down (the entries in hand
  # at the kill age with the outage), not keep its value from before.
  local d lags="" low=1
  for d in "${downs[@]}"; do
    t=$(max_lag "${d%:*}" "${d#*:}")
    lags+="${lags:+, }$t s"
    awk -v l="$t" -v o="$outage" 'BEGIN { exit !(l >= o - 1.5) }' || low=0
  done
  check "inventory_sink_lag_seconds grew during each outage of $outage s (max sampled: $lags)" eq "$low" 1
  report "kill -9 of MariaDB ×$kills, restarted after $outage s" \
    "$((e1 - e0)) database errors retried; /healthz $codes during the outages; lag sampled during them up to $lags"
  fault_end
}

fault_dbslow() {
  fault_begin dbslow 1
  # The sink reaches MariaDB through the delay proxy: each transaction is 3 round trips.
  local d=$((slow_commit_ms / 6)) pport
  pick_port || die "no free port for the delay proxy"
  pport=$picked
  "$proxy_bin" --delay-ms "$d" "$pport" 127.0.0.1 "$mdb_port" 2>>"$res/logs/delayproxy.log" &
  slowproxy_pid=$!
  wait_ready "$slowproxy_pid" 50 bash -c "exec 3<>/dev/tcp/127.0.0.1/$pport" || die "delayproxy did not start"
  sink_start 0 "mysql://sink:$db_pass@127.0.0.1:$pport/shop"
  # Its first connection (handshake, session settings, schema check) is slow too: sell once
  # it is connected.
  wait_until 300 bash -c '[ "$(curl -s -o /dev/null -w "%{http_code}" "$1")" = 200 ]' _ \
    "http://127.0.0.1:${sink_ports[0]}/healthz" || die "the sink did not connect through the delay proxy"
  observers_start
  sale_start
  local b0 b1 e0 e1 t_slow0 t_slow1 rate
  b0=$(sink_metric 0 inventory_sink_batches_total)
  e0=$(sink_metric 0 'inventory_sink_errors_total{kind="db"}')
  t_slow0=$(now_ms)
  sale_finish
  # Slow for the whole sale and at least 3 transactions' worth.
  sleep_until $((t_slow0 + 3 * slow_commit_ms + 500))
  t_slow1=$(now_ms)
  b1=$(sink_metric 0 inventory_sink_batches_total)
  e1=$(sink_metric 0 'inventory_sink_errors_total{kind="db"}')
  local lag_slow; lag_slow=$(max_lag "$t_slow0" "$t_slow1")
  rate=$(awk -v b=$((b1 - b0)) -v t=$((t_slow1 - t_slow0)) 'BEGIN { if (b > 0) printf "%.1f", t / b / 1000; else print "-" }')
  log "  slow database for $((t_slow1 - t_slow0)) ms: $((b1 - b0)) transactions (one per $rate s), $((e1 - e0)) errors, lag up to $lag_slow s"
  # The database recovers: the proxy is replaced by one without delay (the connection drops).
  stop_pid "$slowproxy_pid" 20
  "$proxy_bin" --delay-ms 0 "$pport" 127.0.0.1 "$mdb_port" 2>>"$res/logs/delayproxy.log" &
  slowproxy_pid=$!
  log "  the database is fast again"
  settle_and_check
  observers_stop
  check "while slow the sink committed one transaction per ≥ $((slow_commit_ms * 8 / 10)) ms ($((b1 - b0)) in $((t_slow1 - t_slow0)) ms) with no database error ($((e1 - e0)))" \
    test $((b1 - b0)) -ge 1 -a $(((t_slow1 - t_slow0) / (b1 - b0 > 0 ? b1 - b0 : 1))) -ge $((slow_commit_ms * 8 / 10)) -a $((e1 - e0)) -eq 0
  report "MariaDB slow: $slow_commit_ms ms per transaction (delayproxy $d ms each way), then fast again" \
    "$((b1 - b0)) transactions in $((t_slow1 - t_slow0)) ms while slow, lag up to $lag_slow s"
  stop_pid "$slowproxy_pid" 20; slowproxy_pid=""
  fault_end
}

in_cs_now() { [ "$(metric "$1" inventory_critical_sections_in_flight)" -gt 0 ]; }
fault_instkill() {
  # Each order holds its segment lock 5 ms (--hold-ms): the kill lands inside critical sections.
  fault_begin instkill 2 --hold-ms 5
  sink_start 0 "$db_url"
  observers_start
  sale_start
  local t kills=0 victim=1 incs="" max_cs=0
  for t in $(repeat_times $((window / 3)) 10); do
    sleep_until "$t"
    wait_until 30 in_cs_now "$victim" || true
    local n; n=$(metric "$victim" inventory_critical_sections_in_flight)
    kill -KILL "${inst_pids[victim]}"; wait "${inst_pids[victim]}" 2>/dev/null || true
    incs+="${incs:+, }$n"
    [ "$n" -le "${max_cs:-0}" ] || max_cs=$n
    kills=$((kills + 1))
    log "  kill -9 of instance $victim"
    sleep 2
    launch_instance "$victim" 2 "${inst_flags[@]}"
    inst_pids[victim]=$pid
  done
  sale_finish
  settle_and_check
  observers_stop
  check "an instance was killed inside critical sections (in flight at each kill: $incs)" ge "$max_cs" 1
  report "kill -9 of an inventoryd mid-order (hold 5 ms) ×$kills, restarted" \
    "critical sections in flight at each kill: $incs; $(field s5xx "$result_i") + $(field s5xx "$result_h") 502s from nginx"
  fault_end
}

fault_failover() {
  cluster_mode=1
  fault_begin failover 1 --redis-replica-acks 1
  sink_start 0 "$db_url"
  observers_start
  sale_start
  local slot vport t_kill promoted_ms other
  slot=$(redis-cli -p "${masters_ports%% *}" CLUSTER KEYSLOT "inv:2:{$sku_i/0}:stock")
  vport=$(slot_owner "${masters_ports%% *}" "$slot")
  [ -n "$vport" ] || die "no master for slot $slot"
  for other in $masters_ports; do [ "$other" != "$vport" ] && break; done
  sleep_until $((load_t0 + window * 1000 / 3))
  t_kill=$(now_ms)
  kill -KILL "$(node_pid "$vport")"
  log "  kill -9 of master :$vport (segment 0 of $sku_i)"
  promoted_to() { local o; o=$(slot_owner "$other" "$slot"); [ -n "$o" ] && [ "$o" != "$vport" ]; }
  wait_until 300 promoted_to || die "slot $slot was not failed over"
  promoted_ms=$(($(now_ms) - t_kill))
  log "  its replica promoted after $promoted_ms ms"
  sale_finish
  node_back "$vport"
  log "  the old master is back as a replica"
  settle_and_check
  observers_stop
  report "kill -9 of a Redis master (3+3 cluster, --redis-replica-acks 1), replica promoted" \
    "promoted after $promoted_ms ms; $(field s503_unknown "$result_i") + $(field s503_unknown "$result_h") answers of unknown outcome"
  fault_end
  cluster_mode=0
}

fault_twosinks() {
  fault_begin twosinks 2
  sink_start 0 "$db_url"
  sink_start 1 "$db_url"
  observers_start
  sale_start
  local w0 w1 p claimed try
  sleep_until $((load_t0 + window * 2000 / 3))
  w0=$(sink_metric 0 inventory_sink_events_written_total)
  w1=$(sink_metric 1 inventory_sink_events_written_total)
  # Killed while it holds entries (pending for its consumer name), which the first must then
  # claim; if it had acknowledged them in between, it is restarted and killed again (≤ 5 times).
  for try in 1 2 3 4 5; do
    wait_until 30 consumer_pending_now "${sink_names[1]}" || true
    kill -KILL "${sink_pids[1]}"; wait "${sink_pids[1]}" 2>/dev/null || true
    p=$(consumer_pending "${sink_names[1]}")
    [ "$p" -gt 0 ] && break
    sink_start 1 "$db_url"
    sleep 0.3
  done
  log "  both sinks wrote ($w0 and $w1 events); kill -9 of the second with $p entries pending for it"
  sale_finish
  settle_and_check
  observers_stop
  claimed=$(sink_metric 0 inventory_sink_claimed_total)
  check "both sinks wrote before the kill ($w0 and $w1 events)" test "$w0" -ge 1 -a "$w1" -ge 1
  check "the first claimed the dead one's $p pending entries (inventory_sink_claimed_total $claimed)" \
    test "$p" -ge 1 -a "$claimed" -ge "$p"
  report "two sinks at once; the second killed -9 at 2/3, not restarted" \
    "events before the kill: $w0 + $w1; $p entries pending for the killed one, the first claimed $claimed (XAUTOCLAIM)"
  fault_end
}

t_begin=$(date +%s)
mdb_start
for f in ${faults//,/ }; do
  t_f=$(date +%s)
  "fault_$f"
  log "fault $f: $(($(date +%s) - t_f)) s"
done
elapsed=$(($(date +%s) - t_begin))
{
  echo
  echo "$checks_passed checks passed, $failures failed, in $elapsed s."
  echo "Events in the database: $(mdb_sql shop -e 'SELECT COUNT(*) FROM order_events') (order_events), $(mdb_sql shop -e 'SELECT COUNT(*) FROM orders') orders."
} >>"$res/SUMMARY.md"
log "$checks_passed checks passed, $failures failed, in $elapsed s; $res/SUMMARY.md"
cat "$res/SUMMARY.md" >&2
[ "$failures" -eq 0 ] || exit 1
all_passed=1
