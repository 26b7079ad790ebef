# shellcheck shell=bash
# loadtest/lib.sh — what loadtest/run.sh (the benchmark), loadtest/faults.sh (the fault tests),
# loadtest/chaos.sh and loadtest/cluster.sh share: logging, free ports, starting and stopping
# redis-server, lock servers (Redlock nodes, mariadbd), a Redis Cluster (scripts/cluster.sh) and
# its nodes, inventoryd instances, bare handlers and nginx, and running wrk with the drain of
# common.lua; loadtest/locks.sh uses it too. Sourced, never run.
#
# The sourcing script sets, before it calls anything here:
#   root lt          the repository and its loadtest/ directory
#   lib_name         the prefix of log lines ("loadtest", "faults")
#   res run_dir      results directory (with logs/) and its scratch directory
#   build_dir bin    cmake build directory and the inventoryd binary
#   port_min port_max  range free ports are drawn from; instances (count)
#   lock_wait        --lock-wait-ms of every instance; wrk_threads
# and may set LT_REDIS_PORT, LT_NGINX_PORT, LT_BASE_PORT to fix ports.

log() { printf '[%s %s] %s\n' "$lib_name" "$(date +%H:%M:%S)" "$*" | tee -a "$res/run.log" >&2; }
die() { log "INFRASTRUCTURE FAILURE: $*"; exit 3; }

# --- processes and cleanup ------------------------------------------------------------------

redis_pid="" nginx_pid="" wrk_pid=""
inst_pids=()
# Further background pids the sourcing script wants stopped on exit (probes, proxies...).
extra_pids=()
# Sends TERM to pid $1 and waits up to $2 tenths of a second before KILL. A stopped (SIGSTOP)
# process gets SIGCONT too, or it could not act on the TERM.
stop_pid() {
  local p=$1 n=${2:-50} i
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  kill -CONT "$p" 2>/dev/null || true
  for ((i = 0; i < n; i++)); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
stop_instances() {
  local p
  for p in ${inst_pids[@]+"${inst_pids[@]}"}; do
    kill -TERM "$p" 2>/dev/null || true
    kill -CONT "$p" 2>/dev/null || true
  done
  for p in ${inst_pids[@]+"${inst_pids[@]}"}; do stop_pid "$p" 60; done
  inst_pids=()
}
stop_nginx() { stop_pid "$nginx_pid" 50; nginx_pid=""; }
stop_redis() { stop_pid "$redis_pid" 50; redis_pid=""; }
# Stops everything lib.sh started plus extra_pids; the sourcing script's EXIT trap calls it.
stop_all() {
  local p
  [ -n "$wrk_pid" ] && stop_pid "$wrk_pid" 10
  wrk_pid=""
  for p in ${extra_pids[@]+"${extra_pids[@]}"}; do stop_pid "$p" 20; done
  extra_pids=()
  stop_nginx
  stop_instances
  stop_redis
  cluster_down
  lock_nodes_stop
  lock_db_stop
}

# install_cleanup: on exit (also on failure or interrupt) runs the sourcing script's
# cleanup_hook, when it defines one, then stop_all, and exits with the script's status.
install_cleanup() {
  trap lib_cleanup EXIT
  trap 'log "interrupted"; exit 130' INT TERM
}
lib_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if declare -F cleanup_hook >/dev/null; then cleanup_hook || true; fi
  stop_all
  exit "$rc"
}

# --- set-up -----------------------------------------------------------------------------------

# check_tools: every program the scripts run is installed (scripts/deps.sh installs them).
check_tools() {
  local tool
  for tool in wrk nginx redis-server redis-cli curl cc pkg-config awk; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/deps.sh installs it)"
  done
}

# build_targets TARGET...: configures and builds them in $build_dir (log in logs/cmake.log), and
# inventory-check, the invariant checker verify.sh runs.
build_targets() {
  local t args=(--target inventory-check)
  for t in "$@"; do args+=(--target "$t"); done
  log "building $* in $build_dir"
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$res/logs/cmake.log" 2>&1 \
    || die "cmake configure failed (see $res/logs/cmake.log)"
  cmake --build "$build_dir" -j 2 "${args[@]}" >>"$res/logs/cmake.log" 2>&1 \
    || die "build failed (see $res/logs/cmake.log)"
}

used_ports=" "
# Sets $picked to a port in [port_min, port_max] that nothing listens on and this run has not
# used (called directly, not in $(...), so the used list survives).
# Below the kernel's ephemeral range (32768+), so no outgoing connection can hold it.
pick_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((port_min + (RANDOM * 32768 + RANDOM) % (port_max - port_min + 1)))
    [[ $used_ports == *" $p "* ]] && continue
    if ! (: <>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      picked=$p
      return 0
    fi
  done
  return 1
}
# wait_ready PID TENTHS CMD...: like wait_until, but gives up at once when PID has exited.
wait_ready() {
  local pid=$1 n=$2 i; shift 2
  for ((i = 0; i < n; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# wait_until TENTHS CMD...: runs CMD every 0.1 s until it succeeds, at most TENTHS times.
wait_until() {
  local n=$1 i; shift
  for ((i = 0; i < n; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# Extra redis-server arguments (e.g. AOF settings), used by start_redis and restart_redis.
redis_args=()
# launch_redis: redis-server on $redis_port with $redis_args, its files in $run_dir; sets
# redis_pid; 0 once it answers PING with PONG (its AOF, if any, loaded), within 30 s.
launch_redis() {
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$run_dir" --logfile "$res/logs/redis.log" --daemonize no \
    ${redis_args[@]+"${redis_args[@]}"} &
  redis_pid=$!
  wait_ready "$redis_pid" 300 redis_pong
}
# redis_pong: Redis answers PING with PONG — not "-LOADING" while it replays its AOF, which
# redis-cli prints with exit status 0.
redis_pong() { [ "$(timeout 2 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ]; }
# start_redis: on LT_REDIS_PORT, or on $redis_port when it is set already (a server that is to
# appear later on a port handed out before), else on a free port.
start_redis() {
  local attempt fixed=${LT_REDIS_PORT:-${redis_port:-}}
  for attempt in 1 2 3 4 5; do
    if [ -n "$fixed" ]; then redis_port=$fixed
    else pick_port || die "no free port for Redis"; redis_port=$picked; fi
    launch_redis && return 0
    stop_redis
    [ -z "$fixed" ] || break
  done
  die "redis-server did not start (see $res/logs/redis.log)"
}
rcli() { redis-cli -p "$redis_port" "$@"; }

# --- lock servers apart from the data Redis (inventoryd --lock-redis, --lock-mysql) ---------------

# Every lock server below sets lock_flags, the inventoryd flags that use it; stop_all stops them.
lock_pids=() lock_ports=() lock_flags=()
# Redlock's lock nodes: independent redis-servers, AOF with appendfsync always (a node that
# restarts must remember the locks it granted), each in $run_dir/lockI.
lock_node_up() { [ "$(timeout 2 redis-cli -p "${lock_ports[$1]}" ping 2>/dev/null)" = PONG ]; }
# lock_node_start I: lock node I on lock_ports[I] (picked the first time).
lock_node_start() {
  local i=$1
  if [ -z "${lock_ports[i]:-}" ]; then pick_port || die "no free port for lock node $i"; lock_ports[i]=$picked; fi
  mkdir -p "$run_dir/lock$i"
  redis-server --port "${lock_ports[i]}" --bind 127.0.0.1 --save "" --appendonly yes \
    --appendfsync always --dir "$run_dir/lock$i" --logfile "$res/logs/lock$i.log" --daemonize no &
  lock_pids[i]=$!
  wait_ready "${lock_pids[i]}" 300 lock_node_up "$i" || die "lock node $i did not start"
}
# lock_nodes_start N: N lock nodes; lock_flags=(--lock-redis URLS).
lock_nodes_start() {
  local i urls=""
  for ((i = 0; i < $1; i++)); do
    lock_node_start "$i"
    urls+="${urls:+,}redis://127.0.0.1:${lock_ports[i]}"
  done
  lock_flags=(--lock-redis "$urls")
}
# lock_nodes_stop: stops them; their ports are forgotten only by lock_nodes_forget.
lock_nodes_stop() {
  local p
  for p in ${lock_pids[@]+"${lock_pids[@]}"}; do stop_pid "$p" 50; done
  lock_pids=()
}
lock_nodes_forget() { lock_nodes_stop; lock_ports=(); rm -rf "${run_dir:?}"/lock[0-9]*; }

# The MySQL/MariaDB lock server: a private mariadbd, its data in $run_dir/mysql.
lock_db_pid="" lock_db_port=""
lock_db_sql() { timeout 5 mariadb --no-defaults -h 127.0.0.1 -P "$lock_db_port" -u root -N -B -e "$1"; }
lock_db_up() { [ "$(lock_db_sql 'SELECT 1' 2>/dev/null)" = 1 ]; }
# lock_db_start: mariadbd on lock_db_port (picked and its data dir made the first time).
lock_db_start() {
  local dir=$run_dir/mysql user=()
  [ "$(id -u)" != 0 ] || user=(--user=root)
  if [ -z "$lock_db_port" ]; then
    pick_port || die "no free port for mariadbd"; lock_db_port=$picked
    mariadb-install-db --no-defaults --datadir="$dir/data" --auth-root-authentication-method=normal \
      --skip-test-db ${user[@]+"${user[@]}"} >"$res/logs/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed (logs/mariadb-install.log)"
  fi
  mariadbd --no-defaults --datadir="$dir/data" --bind-address=127.0.0.1 --port="$lock_db_port" \
    --socket="$dir/sock" --pid-file="$dir/mariadbd.pid" --log-error="$res/logs/mariadbd.log" \
    --innodb-buffer-pool-size=32M --skip-name-resolve --max-connections=1000 \
    ${user[@]+"${user[@]}"} &
  lock_db_pid=$!
  wait_ready "$lock_db_pid" 300 lock_db_up || die "mariadbd did not start (logs/mariadbd.log)"
}
# lock_db_setup: starts it with database `locks` and user inv; lock_flags=(--lock-mysql URL).
lock_db_setup() {
  lock_db_start
  lock_db_sql "CREATE DATABASE IF NOT EXISTS locks; CREATE USER IF NOT EXISTS 'inv'@'127.0.0.1'
    IDENTIFIED BY 'inv-pw'; GRANT SELECT, INSERT, UPDATE, CREATE ON locks.* TO 'inv'@'127.0.0.1'" \
    || die "mariadbd: could not create the lock database"
  lock_flags=(--lock-mysql "mysql://inv:inv-pw@127.0.0.1:$lock_db_port/locks")
}
lock_db_stop() { [ -z "$lock_db_pid" ] || stop_pid "$lock_db_pid" 200; lock_db_pid=""; }
# shop_db_setup: the same private mariadbd as the sink's database: database `shop`, user sink
# with the privileges docs/deployment.md lists; shop_db_url=mysql://sink:…/shop (chaos.sh).
shop_db_url=""
shop_db_setup() {
  lock_db_start
  lock_db_sql "CREATE DATABASE IF NOT EXISTS shop; CREATE USER IF NOT EXISTS 'sink'@'127.0.0.1'
    IDENTIFIED BY 'sink-pw'; GRANT SELECT, INSERT, UPDATE, CREATE ON shop.* TO 'sink'@'127.0.0.1'" \
    || die "mariadbd: could not create the sink's database"
  shop_db_url="mysql://sink:sink-pw@127.0.0.1:$lock_db_port/shop"
}

# --- a Redis Cluster (scripts/cluster.sh) ---------------------------------------------------

cluster_dir="" cluster_ports="" masters_ports=""
# cluster_up MASTERS REPLICAS [MIN_REPLICAS_TO_WRITE]: scripts/cluster.sh start, its state in
# $run_dir; sets redis_url (redis-cluster://…), cluster_ports (every node) and masters_ports.
# stop_all stops it (cluster_down).
cluster_up() {
  cluster_dir=$run_dir/cluster-$RANDOM
  CLUSTER_DIR=$cluster_dir CLUSTER_MASTERS=$1 CLUSTER_REPLICAS=$2 \
    CLUSTER_MIN_REPLICAS_TO_WRITE=${3:-0} "$root/scripts/cluster.sh" start >"$res/logs/cluster.env" \
    2>>"$res/logs/cluster.log" || die "scripts/cluster.sh start failed (see $res/logs/cluster.log)"
  redis_url=$(sed -n 's/^CLUSTER_URL=//p' "$res/logs/cluster.env")
  cluster_ports=$(cat "$cluster_dir/ports")
  masters_ports=$(cluster_masters)
}
# cluster_down: stops it (scripts/cluster.sh stop removes its directory); the nodes' logs so
# far are kept as logs/redis-PORT.log (appended).
cluster_down() {
  local p
  [ -n "$cluster_dir" ] || return 0
  for p in $cluster_ports; do
    cat "$cluster_dir/$p/redis.log" >>"$res/logs/redis-$p.log" 2>/dev/null || true
  done
  CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" stop >>"$res/logs/cluster.log" 2>&1 || true
  cluster_dir=""
}
# cluster_nodes: CLUSTER NODES from the first node that answers.
cluster_nodes() {
  local p
  for p in $cluster_ports; do redis-cli -p "$p" CLUSTER NODES 2>/dev/null && return 0; done
  return 1
}
# cluster_masters: the ports of the masters that serve slots now (space-separated, sorted).
cluster_masters() {
  cluster_nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && $9 != "" { split($2, a, "[:@]"); print a[2] }' |
    sort -n | tr '\n' ' ' | sed 's/ $//'
}
# slot_owner PORT SLOT: the port of the master serving SLOT, per CLUSTER NODES of node PORT.
slot_owner() {
  redis-cli -p "$1" CLUSTER NODES | awk -v s="$2" '$3 ~ /master/ && $8 == "connected" {
    for (i = 9; i <= NF; i++) {
      if ($i ~ /^\[/) continue
      n = split($i, r, "-"); lo = r[1] + 0; hi = (n > 1 ? r[2] : r[1]) + 0
      if (s >= lo && s <= hi) { split($2, a, "[:@]"); print a[2]; exit }
    } }'
}
# node_pid PORT: the pid of cluster node PORT (from its pid file; it may be dead).
node_pid() { cat "$cluster_dir/$1/pid" 2>/dev/null; }
# replica_of PORT: the port of a replica of master PORT.
replica_of() {
  redis-cli -p "$1" INFO replication | tr -d '\r' | sed -n 's/^slave0:.*port=\([0-9]*\).*/\1/p'
}
# taken_over PORT: every live node but PORT says PORT serves no slot (its replica took over).
taken_over() {
  local p nodes seen=0
  for p in $cluster_ports; do
    [ "$p" = "$1" ] && continue
    nodes=$(redis-cli -p "$p" CLUSTER NODES 2>/dev/null) || continue
    awk -v me=":$1@" '$2 ~ me && $3 ~ /master/ && $9 != "" { f = 1 } END { exit f }' <<<"$nodes" || return 1
    seen=1
  done
  [ "$seen" = 1 ]
}
# node_back PORT: brings back node PORT, which died (kill -9): once its slots, if it served any,
# are served by its promoted replica (≤ 30 s; a node with no persistence must not come back
# as the master of its slots, empty), scripts/cluster.sh restart: it rejoins as a replica of
# the promoted one. Returns once the cluster is whole again (scripts/cluster.sh wait, ≤ 30 s:
# every node connected, every master with its replica in sync).
node_back() {
  wait_until 300 taken_over "$1" || die "the slots of node $1 were not taken over within 30 s"
  CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" restart "$1" >>"$res/logs/cluster.log" 2>&1 ||
    die "node $1 did not restart (see $cluster_dir/$1/redis.log)"
  cluster_whole || die "the cluster is not whole 30 s after node $1 came back (see $res/logs/cluster.log)"
}
# cluster_whole: scripts/cluster.sh wait (≤ 30 s): every node up, every master with its replica.
cluster_whole() { CLUSTER_DIR=$cluster_dir "$root/scripts/cluster.sh" wait >>"$res/logs/cluster.log" 2>&1; }

# pick_instance_ports: inst_ports[0..instances-1] from LT_BASE_PORT or free ports.
inst_ports=()
pick_instance_ports() {
  local i
  inst_ports=()
  for ((i = 0; i < instances; i++)); do
    if [ -n "${LT_BASE_PORT:-}" ]; then inst_ports+=($((LT_BASE_PORT + i)))
    else pick_port || die "no free port for instance $i"; inst_ports+=("$picked"); fi
  done
}

# Where inventoryd instances reach Redis (a proxy in front of it, say); default $redis_port.
redis_url_port=""
# Or a whole URL (a redis-cluster://…, loadtest/cluster.sh); default none.
redis_url_override=""
# The path start_servers waits for: /readyz needs Redis; /healthz only the process.
ready_path=/readyz
# launch_instance I THREADS [inventoryd flags...]: starts inventoryd I on inst_ports[I] in the
# background and sets $pid. LT_INVENTORYD_ARGS are added to every instance. The preheat PUTs
# come from loopback without a token: --admin-allow-loopback (benchmark instances only).
launch_instance() {
  local i=$1 threads=$2; shift 2
  # shellcheck disable=SC2086
  "$bin" --port "${inst_ports[i]}" --bind 127.0.0.1 \
    --redis "${redis_url_override:-redis://127.0.0.1:${redis_url_port:-$redis_port}}" \
    --threads "$threads" --lock-wait-ms "$lock_wait" --log-level warn \
    --shutdown-grace-ms 3000 --admin-allow-loopback \
    "$@" ${LT_INVENTORYD_ARGS:-} 2>>"$res/logs/inventoryd$i.log" &
  pid=$!
}
# start_servers KIND N THREADS [inventoryd flags...]: starts N servers on inst_ports[0..N-1]:
# KIND "inventoryd" or "bare" ($bare_bin). Waits until each is ready; a server that cannot bind
# its port gets another free port (unless LT_BASE_PORT fixes them).
start_servers() {
  local kind=$1 n=$2 threads=$3; shift 3
  local i attempt p pid url
  inst_pids=()
  for ((i = 0; i < n; i++)); do
    for attempt in 1 2 3; do
      p=${inst_ports[i]}
      if [ "$kind" = bare ]; then
        "$bare_bin" "$p" "$threads" 2>>"$res/logs/bare$i.log" &
        pid=$!; url=http://127.0.0.1:$p/healthz
      else
        launch_instance "$i" "$threads" "$@"
        url=http://127.0.0.1:$p$ready_path
      fi
      if wait_ready "$pid" 100 curl -fsS --max-time 1 "$url"; then
        inst_pids+=("$pid")
        break
      fi
      stop_pid "$pid" 20
      [ -z "${LT_BASE_PORT:-}" ] || die "$kind $i did not become ready on port $p"
      pick_port || die "no free port"
      inst_ports[i]=$picked
      log "$kind $i was not ready on port $p; retrying on ${inst_ports[i]}"
    done
    [ "${#inst_pids[@]}" -eq $((i + 1)) ] || die "$kind $i did not start (see $res/logs/)"
  done
}

# start_nginx N: nginx in front of the first N servers (config/nginx-lb.conf.template).
start_nginx() {
  local n=$1 attempt i ups
  for attempt in 1 2 3; do
    if [ -n "${LT_NGINX_PORT:-}" ]; then nginx_port=$LT_NGINX_PORT
    elif [ -z "${nginx_port:-}" ]; then pick_port || die "no free port for nginx"; nginx_port=$picked; fi
    ups=""
    for ((i = 0; i < n; i++)); do ups+="        server 127.0.0.1:${inst_ports[i]};"$'\n'; done
    mkdir -p "$run_dir/nginx/tmp"
    # shellcheck disable=SC2016
    awk -v run="$run_dir/nginx" -v listen="127.0.0.1:$nginx_port" -v ups="${ups%$'\n'}" '
      /^[[:space:]]*#/ { print; next }
      { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
      /@UPSTREAM_SERVERS@/ { print ups; next }
      { print }' "$root/config/nginx-lb.conf.template" >"$run_dir/nginx/nginx.conf"
    nginx -p "$run_dir/nginx" -c "$run_dir/nginx/nginx.conf" -e "$run_dir/nginx/error.log" \
      >>"$res/logs/nginx.log" 2>&1 &
    nginx_pid=$!
    if wait_ready "$nginx_pid" 50 curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$nginx_port/nginx-204"; then
      return 0
    fi
    stop_nginx
    cat "$run_dir/nginx/error.log" >>"$res/logs/nginx.log" 2>/dev/null || true
    [ -z "${LT_NGINX_PORT:-}" ] || break
    pick_port || die "no free port for nginx"
    nginx_port=$picked
  done
  die "nginx did not start (see $res/logs/nginx.log)"
}

# put_sku SKU STOCK SEGMENTS FILE: PUT (preheat) a SKU through instance 0; the answer in FILE.
# A 503 is asked again (at most 5 times, 0.5 s apart): with --redis-replica-acks a PUT is
# answered 503 "outcome unknown" when a replica was slow to confirm it (a loaded machine), and
# the same PUT again is harmless before the run's orders start.
put_sku() {
  local try
  for try in 1 2 3 4 5; do
    curl -fsS --max-time 10 -X PUT -H 'Content-Type: application/json' \
      -d "{\"stock\": $2, \"segments\": $3}" \
      "http://127.0.0.1:${inst_ports[0]}/api/v1/skus/$1" >"$4" 2>>"$res/logs/curl.log" && return 0
    sleep 0.5
  done
  die "preheat PUT of $1 failed"
}

# --- wrk --------------------------------------------------------------------------------------

# field NAME LINE: the value of NAME=... in a RESULT/VERIFY line.
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }
# True once every wrk thread has left its drain marker in $drain_dir.
all_drained() { [ "$(find "$drain_dir" -name 'thread-*' | wc -l)" -ge "$wrk_threads" ]; }

# start_wrk PREFIX WINDOW: starts wrk in the background with the caller's settings: $url, $sku,
# $qty, $drain_max and o[conns], o[script], o[ok] (an associative array of the caller's);
# output in PREFIX.wrk.txt. Its threads leave drain markers in PREFIX.drain/.
start_wrk() {
  drain_dir=$1.drain
  rm -rf "$drain_dir"; mkdir -p "$drain_dir"
  LT_SKU=$sku LT_QTY=$qty LT_WINDOW_S=$2 LT_OK=${o[ok]} LT_DRAIN_DIR=$drain_dir \
    wrk -t "$wrk_threads" -c "${o[conns]}" -d "$(($2 + drain_max))s" --timeout 10s --latency \
    -s "$lt/${o[script]}" "$url" >"$1.wrk.txt" 2>"$1.wrk.stderr" &
  wrk_pid=$!
}
# finish_wrk PREFIX: stops wrk as soon as every thread has all its answers (or when -d runs
# out) and sets $result to its RESULT line; an infrastructure failure if there is none.
finish_wrk() {
  wait_until $((drain_max * 10 + 10)) all_drained || true
  kill -INT "$wrk_pid" 2>/dev/null || true
  local rc=0
  wait "$wrk_pid" || rc=$?
  wrk_pid=""
  rm -rf "$drain_dir"
  result=$(grep '^RESULT ' "$1.wrk.txt" | tail -1 || true)
  if [ "$rc" -ne 0 ] || [ -z "$result" ]; then
    sed 's/^/  wrk: /' "$1.wrk.stderr" | head -5 >&2 || true
    die "wrk failed ($1.wrk.txt, exit $rc)"
  fi
}
