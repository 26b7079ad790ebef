#!/usr/bin/env bash
# Every lock the seeds discuss on the same sale (issue 24, SPEC §14; the table in docs/lockcore.md
# "Every lock on the same sale"). For each lock kind, 3 inventoryd instances (--threads 2) behind
# nginx (--instances 1: one, straight behind wrk), wrk -t2 -c64 (loadtest/order.lua), a SKU of 16
# segments, orders of 1 unit, the stock on one data Redis (AOF everysec) — or on the cluster for
# the cluster row — and the segment locks on:
#   redis1    the data Redis itself (the default: lockcore's lock beside the stock)
#   redlock3  Redlock over 3 independent lock redis-servers (--lock-redis; AOF always)
#   redlock5  Redlock over 5
#   cluster   a Redis Cluster of 3 masters + 3 replicas holding stock and locks
#             (min-replicas-to-write 1, --redis-replica-acks 1)
#   zk1       one ZooKeeper server (--lock-zookeeper; tickTime 200 ms)
#   zk3       a 3-node ZooKeeper ensemble
#   mysql     a MariaDB server's GET_LOCK (--lock-mysql)
# Phases per kind, each on its own SKU and its own inventoryd (--lock-lease-ms 2000, which is
# also the ZooKeeper session timeout and MariaDB's wait_timeout for the lock sessions):
#   calls     --hold-ms 0, 3 s with every request to the servers traced: the round trips per
#             order (top-level requests, background ones included: renewals, sweeps, pings)
#             to the lock servers and to the data Redis — Redis: MONITOR, the commands a client
#             sent (not those its scripts ran); MariaDB: its general log's Query lines (one per
#             COM_QUERY, a multi-statement once); ZooKeeper: mntr's zk_packets_received, which
#             counts requests and heartbeats. Tracing slows the servers: its orders/s are not
#             reported
#   hold0     --hold-ms 0, WINDOW s: orders/s, p99; and the commands per order the servers ran
#             (Redis: INFO commandstats, those inside scripts too; MariaDB: Questions, i.e.
#             statements; ZooKeeper: as above) in results.tsv
#   hold2     the same with --hold-ms 2 (2 ms inside every critical section)
#   stop      --hold-ms 2, 14 s of load; at 2 s SIGSTOP of one lock server for 4 s (2× the
#             lease/session), then SIGCONT
#   kill      --hold-ms 2, 14 s of load; at 2 s kill -9 of one lock server, restarted on its
#             data 3 s later (not the cluster's: its replica takes over)
# "One lock server": redis1 the data Redis; redlockN lock node 0 (one of N); cluster the master
# of segment 0's slot; zk1 the server; zk3 the leader; mysql mariadbd. For the faults the
# orders/s come from inventoryd's /metrics sampled every 200 ms (before the fault, during it,
# after it), with the longest stretch without a sale, the time until the rate is back at half
# the rate before, 503s and commits refused by fencing (inventory_locks_lost_total). After every
# phase loadtest/verify.sh checks SPEC §8 from the data store against wrk's count of 201 units.
# The ZooKeeper kinds run when inventoryd --help lists --lock-zookeeper (else: a row saying so).
#
# Writes loadtest/results/locks-<UTC timestamp>/: REPORT.md (the table, the command, date and the
# machine's load), results.tsv (a row per kind and phase), raw/ (wrk output, timelines, verify
# output), logs/; results.tsv's lock_per_order and data_per_order are round trips in the calls
# phase and commands run in the others. Everything it starts is stopped on exit, also on
# failure. About 6–7 minutes (its numbers: docs/lockcore.md "Every lock on the same sale").
#
# Several instances because a distributed lock is there for them: within one instance the loops'
# segment gates and chained holds (docs/design.md) already queue most orders locally, so with
# one the lock servers see little contention (--instances 1 shows it).
#
# Usage: loadtest/locks.sh [--kinds LIST] [--phases LIST] [--window S] [--instances N] [--out DIR]
#                          [--dry-run]
#   --kinds    comma-separated subset of redis1,redlock3,redlock5,cluster,zk1,zk3,mysql [all]
#   --phases   comma-separated subset of calls,hold0,hold2,stop,kill [all]
#   --window   seconds of load of hold0 and hold2 [6]; the fault phases take 14
#   --instances  inventoryd instances, 1..8 [3]: 1 straight behind wrk, more behind nginx
#   --dry-run  check the arguments and the binary, print the plan, start nothing
#   --self-test  check the rates, stalls and per-order figures on a made-up timeline
# Exit: 0 every phase ran and every §8 check passed; 1 a §8 check failed; 2 usage; 3
# infrastructure failure.
# Env: BUILD_DIR (build), INVENTORYD_BIN (BUILD_DIR/bin/inventoryd), LT_SKIP_BUILD=1,
#      LT_FAULT_WINDOW_S (14: seconds of load of the fault phases),
#      LT_PORT_MIN/MAX (12000/22000: cluster bus ports are port + 10000), ZK_JAVA (java),
#      ZK_CLASSPATH (Debian's zookeeper jars).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest
all_kinds=redis1,redlock3,redlock5,cluster,zk1,zk3,mysql
all_phases=calls,hold0,hold2,stop,kill
kinds="" phases=$all_phases window=6 out="" dry=0 instances=3 self_test=0
usage() { echo "locks.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kinds) [ $# -ge 2 ] || usage "--kinds needs a list"; kinds=$2; shift 2 ;;
    --kinds=*) kinds=${1#*=}; shift ;;
    --phases) [ $# -ge 2 ] || usage "--phases needs a list"; phases=$2; shift 2 ;;
    --phases=*) phases=${1#*=}; shift ;;
    --window) [ $# -ge 2 ] || usage "--window needs seconds"; window=$2; shift 2 ;;
    --window=*) window=${1#*=}; shift ;;
    --instances) [ $# -ge 2 ] || usage "--instances needs a number"; instances=$2; shift 2 ;;
    --instances=*) instances=${1#*=}; shift ;;
    --out) [ $# -ge 2 ] || usage "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --dry-run) dry=1; shift ;;
    --self-test) self_test=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument $1 (see --help)" ;;
  esac
done
explicit_kinds=$kinds
kinds=${kinds:-$all_kinds}
[[ $window =~ ^[0-9]+$ ]] && [ "$window" -ge 2 ] && [ "$window" -le 600 ] ||
  usage "--window takes whole seconds, 2..600 (got '$window')"
[[ $instances =~ ^[0-9]+$ ]] && [ "$instances" -ge 1 ] && [ "$instances" -le 8 ] ||
  usage "--instances takes 1..8 (got '$instances')"
[ -n "$kinds" ] || usage "--kinds is empty"
[ -n "$phases" ] || usage "--phases is empty"
for k in ${kinds//,/ }; do
  [[ ",$all_kinds," == *",$k,"* ]] || usage "unknown kind '$k' (one of $all_kinds)"
done
for p in ${phases//,/ }; do
  [[ ",$all_phases," == *",$p,"* ]] || usage "unknown phase '$p' (one of $all_phases)"
done

fault_window=${LT_FAULT_WINDOW_S:-14} fault_at=2 stop_s=4 kill_down_s=3
[[ $fault_window =~ ^[0-9]+$ ]] && [ "$fault_window" -ge 8 ] || usage "LT_FAULT_WINDOW_S takes whole seconds, 8 or more"
build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=${INVENTORYD_BIN:-$build_dir/bin/inventoryd}
if [ "$self_test" = 0 ] && { [ "$dry" = 1 ] || [ "${LT_SKIP_BUILD:-0}" = 1 ]; }; then
  [ -x "$bin" ] || { echo "locks.sh: no inventoryd at $bin (build first)" >&2; exit 3; }
fi

# kind_flag KIND: the inventoryd option the kind needs (none for the Redis kinds).
kind_flag() { case "$1" in zk*) echo --lock-zookeeper ;; mysql) echo --lock-mysql ;; esac; }
# kind_supported KIND: this inventoryd has the kind's option (--lock-zookeeper came with issue 24).
# (--help read whole first: grep -q would stop reading, and under pipefail inventoryd's SIGPIPE
# made the pipeline fail at random.)
kind_supported() {
  local f; f=$(kind_flag "$1")
  [ -n "$f" ] || return 0
  [ -n "${bin_help:-}" ] || bin_help=$("$bin" --help 2>&1 || true)
  grep -q -- "$f" <<<"$bin_help"
}

# The plan: kinds to run and kinds skipped (with why).
plan_kinds() {
  run_kinds="" skipped=""
  local k
  for k in ${kinds//,/ }; do
    if ! kind_supported "$k"; then
      # Asked for by name: an error; in the default list: a row saying so.
      [ -z "$explicit_kinds" ] || usage "kind $k needs an inventoryd with $(kind_flag "$k") ($bin has none)"
      skipped+="$k "
    else
      run_kinds+="$k "
    fi
  done
}

# kind_desc KIND: the lock servers of the kind, as the table names them.
kind_desc() {
  case "$1" in
    redis1) echo "one Redis (locks beside the stock)" ;;
    redlock3) echo "Redlock, 3 masters" ;;
    redlock5) echo "Redlock, 5 masters" ;;
    cluster) echo "Redis Cluster, 3 masters + 3 replicas (stock and locks)" ;;
    zk1) echo "ZooKeeper, 1 node" ;;
    zk3) echo "ZooKeeper, 3 nodes" ;;
    mysql) echo "MariaDB GET_LOCK" ;;
  esac
}
kind_flags_desc() {
  case "$1" in
    redis1) echo "--redis redis://… (AOF everysec)" ;;
    redlock3 | redlock5) echo "--lock-redis redis://…×${1#redlock} (AOF always)" ;;
    cluster) echo "--redis redis-cluster://… --redis-replica-acks 1 (min-replicas-to-write 1)" ;;
    zk1 | zk3) echo "--lock-zookeeper host:port×${1#zk} (tickTime 200 ms)" ;;
    mysql) echo "--lock-mysql mysql://…" ;;
  esac
}
fault_victim_desc() {
  case "$1" in
    redis1) echo "the data Redis (it holds the locks)" ;;
    redlock*) echo "lock node 0 (one of ${1#redlock})" ;;
    cluster) echo "the master of segment 0's slot" ;;
    zk1) echo "the server" ;;
    zk3) echo "the leader" ;;
    mysql) echo "mariadbd" ;;
  esac
}

# --- what the fault phases compute from a timeline ("ms created 5xx" lines, file $timeline) -------

# per_order BEFORE AFTER ORDERS [OWN]: (AFTER - BEFORE - OWN) / ORDERS with 2 decimals.
per_order() {
  [ -n "$1" ] && [ -n "$2" ] && [ "$3" -gt 0 ] || { echo "—"; return; }
  awk -v a="$1" -v b="$2" -v n="$3" -v o="${4:-0}" 'BEGIN { printf "%.2f", (b - a - o) / n }'
}
# rate_between A B: orders/s from the timeline between two instants (-1 when unknown).
rate_between() {
  awk -v a="$1" -v b="$2" '{ if ($1 <= a) ca = $2; if ($1 <= b) { cb = $2; tb = $1 } if ($1 <= a) ta = $1 }
    END { if (ca == "" || cb == "" || tb <= ta) print -1; else printf "%d", (cb - ca) * 1000 / (tb - ta) }' "$timeline"
}
# stall_after T: the longest time without a sale after T (ms, between samples that saw one, or
# from the last one to the end of the timeline).
stall_after() {
  awk -v t="$1" '$1 >= t { if (pc != "" && $2 > pc) { d = $1 - pt; if (d > m) m = d; pt = $1 } if (pc == "") pt = $1; pc = $2; last = $1 }
    END { if (last - pt > m) m = last - pt; print m + 0 }' "$timeline"
}
# back_after T HALF: ms from T until the first second selling at HALF orders/s or more.
back_after() {
  awk -v t="$1" -v h="$2" '{ ts[NR] = $1; c[NR] = $2 } END {
    for (i = 1; i <= NR; i++) { if (ts[i] < t) continue
      for (j = i; j <= NR && ts[j] < ts[i] + 1000; j++) ;
      if (j > NR) break
      if ((c[j] - c[i]) * 1000 / (ts[j] - ts[i]) >= h) { print ts[i] - t; exit } }
    print -1 }' "$timeline"
}


# self_test: the computations above on a made-up timeline (ctest script_locks).
self_test() {
  local bad=0
  timeline=$(mktemp "${TMPDIR:-/tmp}/locks-selftest.XXXXXX")
  # 1000 orders/s for 2 s, nothing for 1.6 s, then 400/s, then 1000/s again.
  awk 'BEGIN { c = 0; for (t = 0; t <= 8000; t += 200) {
      if (t > 2000 && t <= 3600) r = 0; else if (t > 3600 && t <= 5000) r = 400; else r = 1000
      if (t > 0) c += r / 5; print 100000 + t, c, 0 } }' >"$timeline"
  st() { if [ "$2" = "$3" ]; then echo "ok   $1 = $2"; else echo "FAIL $1 = $2, expected $3"; bad=1; fi; }
  st "rate before" "$(rate_between 100500 102000)" 1000
  st "rate during the stall" "$(rate_between 102300 103600)" 0
  st "rate after" "$(rate_between 105200 108000)" 1000
  st "longest stall" "$(stall_after 102000)" 1800
  # the first second at ≥ 500/s: from 4.2 s (0.8 s at 400/s, 0.2 s at 1000/s)
  st "back at half rate" "$(back_after 102000 500)" 2200
  st "never back" "$(back_after 102000 5000)" -1
  head -19 "$timeline" >"$timeline.cut" # up to 3.6 s: no sale after 2 s to the end
  st "stall to the end" "$(timeline=$timeline.cut stall_after 102000)" 1600
  rm -f "$timeline.cut"
  st "per order" "$(per_order 10 40 20)" 1.50
  st "per order, own calls" "$(per_order 10 40 20 2)" 1.40
  st "per order, none" "$(per_order 10 40 0)" "—"
  rm -f "$timeline"
  return "$bad"
}
if [ "$self_test" = 1 ]; then self_test; exit; fi

plan_kinds
if [ "$dry" = 1 ]; then
  echo "locks.sh plan: $instances× inventoryd $bin$([ "$instances" = 1 ] && echo ", wrk straight to it" || echo " behind nginx"); hold phases $window s, fault phases $fault_window s; phases: $phases"
  for k in $run_kinds; do
    echo "  $k: $(kind_desc "$k"); inventoryd $(kind_flags_desc "$k"); faults hit $(fault_victim_desc "$k")"
  done
  for k in $skipped; do echo "  $k: skipped ($bin has no $(kind_flag "$k"))"; done
  exit 0
fi

port_min=${LT_PORT_MIN:-12000}
port_max=${LT_PORT_MAX:-22000}
wrk_threads=2
conns=64
threads=2
lock_wait=2000
lease=2000
segments=16 qty=1
stock=1000000
stamp=$(date -u +%Y%m%dT%H%M%SZ)
res=${out:-$lt/results/locks-$stamp}
mkdir -p "$res/raw" "$res/logs"
run_dir=$res/run
mkdir -p "$run_dir"
lib_name=locks
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

# --- ZooKeeper servers (the Debian package's jars, as lockcore/tests/support/zk_fixture.c) -------

zk_cp=${ZK_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar:/usr/share/java/netty-handler.jar:/usr/share/java/netty-transport.jar:/usr/share/java/netty-common.jar:/usr/share/java/netty-buffer.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:/usr/share/java/netty-transport-native-epoll.jar:/usr/share/java/netty-transport-native-unix-common.jar:/usr/share/java/metrics-core.jar:/usr/share/java/commons-cli.jar:/usr/share/java/snappy-java.jar}
zk_n=0 zk_pids=() zk_ports=() zk_hosts=""
# zk_4lw PORT WORD: a four-letter word's answer (2 s at most; empty when none).
zk_4lw() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}
zk_mode() { zk_4lw "${zk_ports[$1]}" srvr | sed -n 's/^Mode: //p'; }
# zk_leader: the index of the leader (or the standalone server); empty when none.
zk_leader() {
  local i m
  for ((i = 0; i < zk_n; i++)); do
    m=$(zk_mode "$i")
    if [ "$m" = leader ] || [ "$m" = standalone ]; then echo "$i"; return 0; fi
  done
  return 1
}
# zk_serving: every live server answers srvr with a mode, and there is a leader.
zk_serving() {
  local i
  for ((i = 0; i < zk_n; i++)); do
    kill -0 "${zk_pids[i]}" 2>/dev/null || continue
    [ -n "$(zk_mode "$i")" ] || return 1
  done
  zk_leader >/dev/null
}
zk_launch() {
  local i=$1
  "${ZK_JAVA:-java}" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dzookeeper.admin.enableServer=false -cp "$zk_cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$run_dir/zk$i/zoo.cfg" \
    >>"$res/logs/zk$i.log" 2>&1 &
  zk_pids[i]=$!
}
# zk_start N: N servers (1 standalone, or an ensemble), each with its cfg and data dir in
# $run_dir/zkI; lock_flags=(--lock-zookeeper HOSTS) once a leader serves (60 s at most: the JVM).
zk_start() {
  local n=$1 i k peers=() elects=()
  zk_n=$n zk_ports=() zk_pids=() zk_hosts=""
  for ((i = 0; i < n; i++)); do
    pick_port || die "no free port for ZooKeeper"; zk_ports[i]=$picked
    pick_port || die "no free port for ZooKeeper"; peers[i]=$picked
    pick_port || die "no free port for ZooKeeper"; elects[i]=$picked
    zk_hosts+="${zk_hosts:+,}127.0.0.1:${zk_ports[i]}"
  done
  for ((i = 0; i < n; i++)); do
    mkdir -p "$run_dir/zk$i/data"
    echo "$((i + 1))" >"$run_dir/zk$i/data/myid"
    {
      printf 'tickTime=200\ninitLimit=20\nsyncLimit=10\ndataDir=%s\nclientPort=%d\n' "$run_dir/zk$i/data" "${zk_ports[i]}"
      printf 'clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n'
      printf 'maxClientCnxns=0\npreAllocSize=4096\nsnapCount=100000\n'
      if [ "$n" -gt 1 ]; then
        for ((k = 0; k < n; k++)); do printf 'server.%d=127.0.0.1:%d:%d\n' $((k + 1)) "${peers[k]}" "${elects[k]}"; done
      fi
    } >"$run_dir/zk$i/zoo.cfg"
    zk_launch "$i"
  done
  wait_until 600 zk_serving || die "ZooKeeper ($n) did not serve within 60 s (logs/zk*.log)"
  lock_flags=(--lock-zookeeper "$zk_hosts")
}
zk_stop() {
  local p
  for p in ${zk_pids[@]+"${zk_pids[@]}"}; do stop_pid "$p" 50; done
  zk_pids=() zk_n=0
  rm -rf "${run_dir:?}"/zk[0-9]*
}

# --- the kinds: up, down, calls, the fault's victim ------------------------------------------

cleanup_hook() {
  [ -z "${stop_file:-}" ] || touch "$stop_file"
  [ -z "${sampler_pid:-}" ] || stop_pid "$sampler_pid" 20
  zk_stop
}
install_cleanup

check_tools
[ "${LT_SKIP_BUILD:-0}" = 1 ] || build_targets inventoryd
[ -x "$bin" ] || die "no inventoryd at $bin"
for k in $run_kinds; do
  case "$k" in
    zk*) command -v "${ZK_JAVA:-java}" >/dev/null || die "java is not installed (scripts/deps.sh: zookeeper)" ;;
    mysql) command -v mariadbd >/dev/null || die "mariadbd is not installed (scripts/deps.sh)" ;;
    cluster) command -v python3 >/dev/null || die "python3 is not installed (scripts/deps.sh)" ;;
  esac
done

now_ms() { date +%s%3N; }
kind="" redis_port=""
redis_args=(--appendonly yes --appendfsync everysec)
# kind_up KIND: its data store and lock servers; sets lock_flags (and redis_url_override).
kind_up() {
  kind=$1 lock_flags=() redis_url_override=""
  case "$kind" in
    cluster)
      cluster_up 3 1 1
      redis_url_override=$redis_url
      lock_flags=(--redis-replica-acks 1)
      ;;
    *) start_redis ;;
  esac
  case "$kind" in
    redlock*) lock_nodes_start "${kind#redlock}" ;;
    zk*) zk_start "${kind#zk}" ;;
    mysql) lock_db_setup ;;
  esac
  R[$kind.load]=$(cut -d' ' -f1 /proc/loadavg)
  log "$kind up: $(kind_desc "$kind"); inventoryd ${lock_flags[*]:-(locks on the data Redis)}"
}
kind_down() {
  stop_instances
  lock_nodes_forget
  lock_db_stop
  zk_stop
  cluster_down
  stop_redis
  redis_port="" redis_url_override=""
  rm -rf "${run_dir:?}"/appendonlydir "${run_dir:?}"/mysql "$run_dir"/*.rdb
  lock_db_port=""
}

# redis_calls PORT...: the commands Redis nodes ran (INFO commandstats; INFO itself left out).
redis_calls() {
  local p s=0 c
  for p in "$@"; do
    c=$(timeout 3 redis-cli -p "$p" INFO commandstats 2>/dev/null | tr -d '\r' |
      awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" { s += $3 } END { print s + 0 }')
    s=$((s + c))
  done
  echo "$s"
}
# lock_calls: the calls the lock servers have served so far (see the header for what counts).
lock_calls() {
  local i s=0 v
  case "$kind" in
    redis1) redis_calls "$redis_port" ;;
    redlock*) redis_calls "${lock_ports[@]}" ;;
    cluster)
      # shellcheck disable=SC2046 # the ports, one word each
      redis_calls $(cluster_masters) ;;
    zk*)
      for ((i = 0; i < zk_n; i++)); do
        v=$(zk_4lw "${zk_ports[i]}" mntr | awk '$1 == "zk_packets_received" { print $2 }')
        s=$((s + ${v:-0}))
      done
      echo "$s" ;;
    # Questions counts the SHOW itself: one per reading, subtracted by per_order.
    mysql) lock_db_sql "SHOW GLOBAL STATUS LIKE 'Questions'" | awk '{ print $2 }' ;;
  esac
}
# calls_dump OUT: what lock_calls and data_calls add up, command by command, for the record.
calls_dump() {
  local p i
  {
    case "$kind" in
      redlock*) for p in "${lock_ports[@]}"; do echo "# lock node :$p"; timeout 3 redis-cli -p "$p" INFO commandstats; done ;;
      cluster)
        # shellcheck disable=SC2046 # the ports, one word each
        for p in $(cluster_masters); do echo "# master :$p"; timeout 3 redis-cli -p "$p" INFO commandstats; done ;;
      zk*) for ((i = 0; i < zk_n; i++)); do echo "# ZooKeeper $i"; zk_4lw "${zk_ports[i]}" mntr; done ;;
      mysql) lock_db_sql "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Queries') OR Variable_name LIKE 'Com_select' OR Variable_name LIKE 'Com_insert' OR Variable_name LIKE 'Com_update' OR Variable_name LIKE 'Com_do'" ;;
    esac
    [ -z "$redis_port" ] || { echo "# data Redis :$redis_port"; timeout 3 redis-cli -p "$redis_port" INFO commandstats; }
  } >"$1" 2>&1 || true
}
# data_calls: the data Redis's calls; empty when it is the lock server too.
data_calls() {
  case "$kind" in
    redis1 | cluster) echo "" ;;
    *) redis_calls "$redis_port" ;;
  esac
}

# --- tracing the round trips (the calls phase) ----------------------------------------------------
trace_pids=()
# trace_ports: the Redis servers to MONITOR ("lock:PORT" or "data:PORT").
trace_ports() {
  local p
  case "$kind" in
    redis1) echo "data:$redis_port" ;;
    redlock*) for p in "${lock_ports[@]}"; do echo "lock:$p"; done; echo "data:$redis_port" ;;
    cluster)
      # shellcheck disable=SC2046 # the ports, one word each
      for p in $(cluster_masters); do echo "data:$p"; done ;;
    zk* | mysql) echo "data:$redis_port" ;;
  esac
}
# trace_start: MONITOR every Redis of the kind (through awk: "N" top-level commands then "N cmd"
# per command, in $raw.monitor.ROLE.PORT); the general log on, or mntr read, for the others.
trace_start() {
  local t role port
  trace_pids=()
  for t in $(trace_ports); do
    role=${t%%:*} port=${t#*:}
    # redis-cli's pid in a file (the pipeline's $! is awk's): trace_stop ends redis-cli, awk
    # then prints its counts. MONITOR lines: TIME [DB ADDR] "cmd" ..., "[DB lua]" in a script.
    bash -c 'echo $$ >"$1"; exec redis-cli -p "$2" MONITOR' _ "$raw.monitor.$role.$port.pid" "$port" 2>/dev/null |
      awk '$1 ~ /^[0-9]+\.[0-9]+$/ && $3 != "lua]" { n++; c[tolower($4)]++ } END { print n + 0; for (k in c) print c[k], k }' \
        >"$raw.monitor.$role.$port" &
    trace_pids+=($!)
  done
  case "$kind" in
    zk*) zk_packets >"$raw.mntr.before" ;;
    mysql) lock_db_sql "SET GLOBAL general_log_file = '$run_dir/general.log'; SET GLOBAL general_log = 1" ;;
  esac
  sleep 0.3 # MONITOR attached
}
# zk_packets: zk_packets_received summed over the ensemble's live servers.
zk_packets() {
  local i s=0 v
  for ((i = 0; i < zk_n; i++)); do
    v=$(zk_4lw "${zk_ports[i]}" mntr | awk '$1 == "zk_packets_received" { print $2 }')
    s=$((s + ${v:-0}))
  done
  echo "$s"
}
# trace_stop ORDERS: ends the traces; sets trace_lock and trace_data (round trips per order).
trace_stop() {
  local f p lock=0 data=0 n
  for f in "$raw".monitor.*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f"); kill -TERM "$p" 2>/dev/null || true; rm -f "$f"
  done
  for p in ${trace_pids[@]+"${trace_pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  trace_pids=()
  for f in "$raw".monitor.*; do
    [ -e "$f" ] || continue
    n=$(head -1 "$f")
    case "$f" in *.monitor.lock.*) lock=$((lock + n)) ;; *) data=$((data + n)) ;; esac
  done
  case "$kind" in
    zk*) lock=$(($(zk_packets) - $(cat "$raw.mntr.before"))) ;;
    mysql)
      lock_db_sql "SET GLOBAL general_log = 0" || true
      # Query lines of the lock user's connections: "[DATE TIME] ID Query TEXT" (the SETs
      # above are root's and come first and last: two lines).
      n=$(grep -cE '^[[:space:]]*([0-9]{6}[[:space:]]+[0-9:]{7,8}[[:space:]]+)?[0-9]+[[:space:]]+Query' "$run_dir/general.log" || true)
      lock=$((n > 2 ? n - 2 : 0))
      mv "$run_dir/general.log" "$raw.general.log.txt" 2>/dev/null || true
      gzip -f "$raw.general.log.txt" 2>/dev/null || true ;;
  esac
  trace_lock=$(per_order 0 "$lock" "$1") trace_data=$(per_order 0 "$data" "$1")
  # the Redis kinds whose lock servers hold the stock too: one number (data column "=")
  case "$kind" in redis1 | cluster) trace_lock=$trace_data trace_data="=" ;; esac
}

victim_pid="" victim_name=""
# victim_pick: the lock server a fault hits (see the header).
victim_pick() {
  local i slot port
  case "$kind" in
    redis1) victim_pid=$redis_pid victim_name="data Redis :$redis_port" ;;
    redlock*) victim_pid=${lock_pids[0]} victim_name="lock node 0 :${lock_ports[0]}" ;;
    cluster)
      port=${cluster_ports%% *}
      slot=$(redis-cli -p "$port" CLUSTER KEYSLOT "$sku/0")
      victim_port=$(slot_owner "$port" "$slot")
      victim_pid=$(node_pid "$victim_port") victim_name="master :$victim_port (slot $slot)" ;;
    zk*)
      i=$(zk_leader) || die "no ZooKeeper leader"
      victim_zk=$i victim_pid=${zk_pids[i]} victim_name="ZooKeeper $i :${zk_ports[i]} ($(zk_mode "$i"))" ;;
    mysql) victim_pid=$lock_db_pid victim_name="mariadbd :$lock_db_port" ;;
  esac
  [ -n "$victim_pid" ] || die "no process to hit for $kind"
}
# victim_restart: the killed server again, on its data (the cluster's is left to its replica).
victim_restart() {
  case "$kind" in
    redis1) launch_redis || die "the data Redis did not restart" ;;
    redlock*) lock_node_start 0 ;;
    cluster) return 1 ;;
    zk*) zk_launch "$victim_zk" ;;
    mysql) lock_db_start ;;
  esac
}
# victim_up: the restarted server answers (ZooKeeper: serves in a mode).
victim_up() {
  case "$kind" in
    redis1) redis_pong ;;
    redlock*) lock_node_up 0 ;;
    zk*) [ -n "$(zk_mode "$victim_zk")" ] ;;
    mysql) lock_db_up ;;
  esac
}
# kind_whole PHASE: after PHASE's fault, the kind serves as at the start (30 s at most; the
# cluster: its killed master back as a replica once its replica took over, lib.sh node_back).
kind_whole() {
  case "$kind" in
    redis1) wait_until 300 redis_pong ;;
    redlock*) wait_until 300 lock_node_up 0 ;;
    cluster) if [ "$1" = kill ]; then node_back "$victim_port"; else cluster_whole; fi ;;
    zk*) wait_until 300 zk_serving ;;
    mysql) wait_until 300 lock_db_up ;;
  esac
}

# --- one phase ---------------------------------------------------------------------------------

failures=0
tsv=$res/results.tsv
printf 'kind\tphase\thold_ms\twindow_s\trate\tp50_ms\tp99_ms\tcreated\ts503\tunknown\tlock_per_order\tdata_per_order\tbase_rate\tduring_rate\tafter_rate\tstall_ms\tback_ms\tlocks_lost\tvictim\tverify\n' >"$tsv"
declare -A R
# metrics_all: every instance's /metrics, one after the other (1 s each at most).
metrics_all() {
  local i
  for ((i = 0; i < instances; i++)); do
    curl -fsS --max-time 1 "http://127.0.0.1:${inst_ports[i]}/metrics" 2>/dev/null || echo "instance_down $i"
  done
}
# metric NAME: a /metrics line's value summed over the instances ("NAME VALUE"; labels part of
# NAME), or -1 when an instance did not answer.
metric() {
  metrics_all | awk -v n="$1" '$1 == "instance_down" { d = 1 } $1 == n { v += $2 } END { print (d ? -1 : v + 0) }'
}
# sampler OUT: every 200 ms "ms created 5xx" summed from the instances' /metrics (they answer
# without the store).
sampler() {
  local m
  while [ ! -e "$stop_file" ]; do
    m=$(metrics_all | awk '$1 == "instance_down" { d = 1 }
      $1 == "inventory_orders_total{result=\"created\"}" { c += $2 }
      $1 == "inventory_requests_total{code=\"5xx\"}" { e += $2 } END { if (!d) print c + 0, e + 0 }')
    [ -z "$m" ] || echo "$(now_ms) $m" >>"$1"
    sleep 0.2
  done
}
sleep_until() {
  local d=$(($1 - $(now_ms)))
  [ "$d" -le 0 ] || sleep "$(awk -v d="$d" 'BEGIN { print d / 1000 }')"
}
# verify_phase: SPEC §8 for the phase's SKU from the data store against wrk's counts.
verify_phase() {
  local amb rc=0 target=(--redis-port "$redis_port")
  [ "$kind" != cluster ] || target=(--redis-cluster "$redis_url")
  amb=$(($(field unanswered "$result") + $(field s503_unknown "$result") + $(field s5xx "$result")))
  "$lt/verify.sh" "${target[@]}" --sku "$sku" --stock-total "$stock" --units "$(field units "$result")" \
    --orders "$(field created "$result")" --unanswered "$amb" --max-qty "$qty" >"$raw.verify.txt" 2>&1 || rc=$?
  [ "$rc" -ne 3 ] || die "verify could not read the data store ($raw.verify.txt)"
  if [ "$rc" -eq 0 ]; then verdict="✓"
  else
    verdict="✗"; failures=$((failures + 1))
    grep -v '✓' "$raw.verify.txt" | sed 's/^/  /' >&2 || true
  fi
  log "  SPEC §8 $verdict ($(grep '^VERIFY ' "$raw.verify.txt" | cut -c1-160))"
}
# run_phase PHASE LAST: one phase of the current kind (see the header); LAST 1 when no phase of
# the kind follows (then a fault's server is not waited for).
run_phase() {
  local phase=$1 last=$2 hold w lc0 lc1 dc0 dc1 created
  case "$phase" in
    calls) hold=0 w=3 ;;
    hold0) hold=0 w=$window ;;
    hold2) hold=2 w=$window ;;
    *) hold=2 w=$fault_window ;;
  esac
  sku=lk-$kind-$phase raw=$res/raw/$kind-$phase
  log "$kind $phase (hold $hold ms, $w s; load $(cut -d' ' -f1-3 /proc/loadavg))"
  start_servers inventoryd "$instances" "$threads" --hold-ms "$hold" --lock-lease-ms "$lease" ${lock_flags[@]+"${lock_flags[@]}"}
  put_sku "$sku" "$stock" "$segments" "$raw.put.json"
  local -A o=([conns]=$conns [script]=order.lua [ok]=201)
  url=http://127.0.0.1:${inst_ports[0]}/api/v1/orders
  if [ "$instances" -gt 1 ]; then
    start_nginx "$instances"
    url=http://127.0.0.1:$nginx_port/api/v1/orders
  fi
  drain_max=$(((lock_wait + hold + lease + 999) / 1000 + 12))
  lc0=$(lock_calls) dc0=$(data_calls)
  calls_dump "$raw.calls.before"
  stop_file=$raw.stop
  timeline=$raw.timeline
  rm -f "$stop_file" "$timeline"
  sampler "$timeline" &
  sampler_pid=$!
  [ "$phase" != calls ] || trace_start
  start_wrk "$raw" "$w"
  local t0 tf te="" lost0
  t0=$(now_ms)
  lost0=$(metric inventory_locks_lost_total)
  victim_name=""
  case "$phase" in
    stop | kill)
      victim_pick
      tf=$((t0 + fault_at * 1000))
      sleep_until "$tf"
      if [ "$phase" = stop ]; then
        kill -STOP "$victim_pid"
        log "  SIGSTOP $victim_name"
        sleep_until $((tf + stop_s * 1000))
        kill -CONT "$victim_pid"
        te=$(now_ms)
        log "  SIGCONT after $((te - tf)) ms"
      else
        kill -KILL "$victim_pid"
        wait "$victim_pid" 2>/dev/null || true # ours (not the cluster's nodes): no "Killed" notice
        log "  kill -9 $victim_name"
        sleep_until $((tf + kill_down_s * 1000))
        # The cluster's dead master is not restarted: its replica takes over.
        if victim_restart; then
          te=$(now_ms)
          if wait_until $(((t0 + w * 1000 - te) / 100)) victim_up; then
            log "  restarted $((te - tf)) ms after the kill, serving again after $(($(now_ms) - tf)) ms"
          else
            log "  restarted $((te - tf)) ms after the kill, not serving by the end of the load"
          fi
        else
          te=$((tf + kill_down_s * 1000))
        fi
      fi
      ;;
  esac
  sleep_until $((t0 + w * 1000))
  finish_wrk "$raw"
  if [ "$phase" = calls ]; then
    trace_stop "$(field created "$result")"
    R[$kind.calls.lock]=$trace_lock R[$kind.calls.data]=$trace_data
    log "  round trips per order: lock servers $trace_lock, data Redis $trace_data"
  fi
  touch "$stop_file"; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""
  lc1=$(lock_calls) dc1=$(data_calls)
  calls_dump "$raw.calls.after"
  created=$(field created "$result")
  local own=0
  [ "$kind" != mysql ] || own=1
  R[$kind.$phase.rate]=$(field rate "$result")
  R[$kind.$phase.p99]=$(awk -v u="$(field p99_us "$result")" 'BEGIN { printf "%.1f", u / 1000 }')
  R[$kind.$phase.p50]=$(awk -v u="$(field p50_us "$result")" 'BEGIN { printf "%.1f", u / 1000 }')
  # Calls per order only where no server restarted (its counters start again from 0).
  if [ "$phase" = calls ]; then
    R[$kind.$phase.lc]=${R[$kind.calls.lock]} R[$kind.$phase.dc]=${R[$kind.calls.data]}
  elif [ -z "$victim_name" ]; then
    R[$kind.$phase.lc]=$(per_order "$lc0" "$lc1" "$created" "$own")
    R[$kind.$phase.dc]=$([ -n "$dc0" ] && per_order "$dc0" "$dc1" "$created" || echo "=")
  else
    R[$kind.$phase.lc]="—" R[$kind.$phase.dc]="—"
  fi
  R[$kind.$phase.s503]=$(field s503 "$result")
  local lost1 base="" during="" after="" stall="" back=""
  lost1=$(metric inventory_locks_lost_total)
  R[$kind.$phase.lost]=$((lost1 >= 0 && lost0 >= 0 ? lost1 - lost0 : -1))
  if [ -n "$te" ]; then
    base=$(rate_between $((t0 + 500)) "$tf")
    during=$(rate_between $((tf + 300)) "$te")
    after=$(rate_between $((te + 1000)) $((t0 + w * 1000)))
    stall=$(stall_after "$tf")
    back=$(back_after "$tf" $((base / 2)))
    R[$kind.$phase.fault]="$base → $during → $after/s; longest stall $(awk -v m="$stall" 'BEGIN { printf "%.1f", m / 1000 }') s, half rate $(awk -v m="$back" 'BEGIN { if (m < 0) print "never"; else printf "%.1f s", m / 1000 }') after; $(field s503 "$result") 503s; ${R[$kind.$phase.lost]} refused by fencing"
    log "  orders/s before $base, during $during, after $after; longest stall $stall ms; back at half rate $back ms after the fault"
  fi
  verify_phase
  R[$kind.$phase.verify]=$verdict
  log "  $created orders, $(field rate "$result")/s, p99 ${R[$kind.$phase.p99]} ms, lock calls/order ${R[$kind.$phase.lc]}, data Redis calls/order ${R[$kind.$phase.dc]}, 503s $(field s503 "$result")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$kind" "$phase" "$hold" "$w" "$(field rate "$result")" "${R[$kind.$phase.p50]}" "${R[$kind.$phase.p99]}" \
    "$created" "$(field s503 "$result")" \
    "$(($(field unanswered "$result") + $(field s503_unknown "$result") + $(field s5xx "$result")))" \
    "${R[$kind.$phase.lc]}" "${R[$kind.$phase.dc]}" "$base" "$during" "$after" "$stall" "$back" \
    "${R[$kind.$phase.lost]}" "$victim_name" "$verdict" >>"$tsv"
  stop_nginx
  stop_instances
  if [ -n "$te" ] && [ "$last" = 0 ]; then kind_whole "$phase" || die "$kind did not recover within 30 s after the $phase fault"; fi
}

# --- the run -----------------------------------------------------------------------------------

pick_instance_ports
t_begin=$(date +%s)
load_begin=$(cut -d' ' -f1-3 /proc/loadavg)
log "kinds: $run_kinds${skipped:+(skipped: $skipped)}; phases: $phases; results in $res"
for k in $run_kinds; do
  kind_up "$k"
  n_phases=$(wc -w <<<"${phases//,/ }") i_phase=0
  for p in ${phases//,/ }; do
    i_phase=$((i_phase + 1))
    run_phase "$p" $((i_phase == n_phases ? 1 : 0))
  done
  kind_down
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
secs=$(($(date +%s) - t_begin))

# cell KIND PHASE FIELD: a value, or — when the phase did not run.
cell() { echo "${R[$1.$2.$3]:-—}"; }
report=$res/REPORT.md
{
  echo "# Every lock on the same sale — $(date -u +%F\ %H:%MZ)"
  echo
  echo "Command: \`loadtest/locks.sh${explicit_kinds:+ --kinds $explicit_kinds}$([ "$instances" = 3 ] || echo " --instances $instances")$([ "$phases" = "$all_phases" ] || echo " --phases $phases")$([ "$window" = 6 ] || echo " --window $window")\` ($secs s)."
  echo "Machine: $(nproc) cores, load average $load_begin at the start, $load_end at the end (shared with other work)."
  echo "$instances× inventoryd (--threads 2, lease 2000 ms) $([ "$instances" = 1 ] && echo "straight behind" || echo "behind nginx, behind") wrk -t2 -c64, 16 segments, quantity 1;"
  echo "hold phases ${window} s, fault phases $fault_window s at hold 2 ms (fault at 2 s: SIGSTOP for 4 s, or kill -9 and restart 3 s later)."
  echo
  echo "| lock (a fault hits) | load | hold 0: orders/s, p99 | hold 2 ms: orders/s, p99 | round trips per order: lock servers, data Redis | SIGSTOP of one lock server for 4 s: orders/s before → during → after | kill -9 of one lock server, restarted 3 s later | §8 |"
  echo "|---|---|---|---|---|---|---|---|"
  for k in $run_kinds; do
    v=""
    for p in ${phases//,/ }; do v+=$(cell "$k" "$p" verify); done
    printf '| %s (%s) | %s | %s, %s ms | %s, %s ms | %s, %s | %s | %s | %s |\n' \
      "$(kind_desc "$k")" "$(fault_victim_desc "$k")" "${R[$k.load]}" "$(cell "$k" hold0 rate)" "$(cell "$k" hold0 p99)" \
      "$(cell "$k" hold2 rate)" "$(cell "$k" hold2 p99)" "$(cell "$k" calls lock)" "$(cell "$k" calls data)" \
      "$(cell "$k" stop fault)" "$(cell "$k" kill fault)" "$v"
  done
  for k in $skipped; do
    echo "| $(kind_desc "$k") | | skipped: this inventoryd has no $(kind_flag "$k") | | | | | |"
  done
  echo
  echo "load: the machine's 1-minute load average when the kind started (2 cores; other work shares them)."
  echo "Raw rows: results.tsv; per phase: raw/KIND-PHASE.{wrk.txt,timeline,verify.txt}."
} >"$report"
log "done in $secs s; $failures §8 failures; $report"
cat "$report" >&2
[ "$failures" -eq 0 ] || exit 1
