#!/usr/bin/env bash
# A local Redis Cluster for tests, benchmarks and the demo (`scripts/run.sh --cluster`): 3 masters
# with 1 replica each (CLUSTER_MASTERS, CLUSTER_REPLICAS), every node a `redis-server
# --cluster-enabled yes` on 127.0.0.1, joined with `redis-cli --cluster create`, waited for until
# every node reports cluster_state:ok and sees every master with its replicas.
#
#   scripts/cluster.sh                 start, print the URL, wait for Ctrl-C, stop (trap)
#   scripts/cluster.sh run CMD [ARG…]  start, run CMD with CLUSTER_URL, CLUSTER_PORTS and
#                                      CLUSTER_DIR exported, stop (trap, also when CMD fails or
#                                      the script is killed by INT/TERM); exits with CMD's status
#   scripts/cluster.sh start           start in the background and return; prints
#                                      CLUSTER_URL=…, CLUSTER_PORTS=…, CLUSTER_DIR=… lines
#                                      (eval-able); stop it later with `stop`
#   scripts/cluster.sh stop            stop the cluster whose state is in CLUSTER_DIR (kill -9
#                                      after 3 s), remove the dir
#   scripts/cluster.sh status          CLUSTER NODES of the cluster in CLUSTER_DIR
#   scripts/cluster.sh restart PORT    start node PORT of the cluster in CLUSTER_DIR again, with
#                                      its settings and nodes.conf, after it died (kill -9): a
#                                      master whose replica took over comes back as that
#                                      replica's replica. Returns once it answers PING
#   scripts/cluster.sh wait            wait (CLUSTER_WAIT_S) until the cluster in CLUSTER_DIR is
#                                      whole as at start: every node up and connected, every
#                                      master with its replicas in sync; exit 1 if it is not
#
# The nodes use a short cluster-node-timeout (CLUSTER_NODE_TIMEOUT, 1000 ms) so that a replica
# takes over within a few seconds of its master's death, and cluster-require-full-coverage no:
# while one master is down (before its replica is promoted) the other masters go on serving
# their slots, which is what lets a sale fail over to segments on the other masters. No
# persistence (save "", appendonly no): the replicas are the copies. A replica's full sync starts
# at once (repl-diskless-sync-delay 0; Redis 7 otherwise waits 5 s for more replicas to share it:
# 5 s more for the cluster's start and for every old master back as a replica after a failover).
# CLUSTER_MIN_REPLICAS_TO_WRITE=N (default 0) makes every master refuse writes while fewer than
# N replicas are connected with a lag of at most CLUSTER_MIN_REPLICAS_MAX_LAG seconds (2): the
# companion of inventoryd --redis-replica-acks N (docs/scaling.md), so that a promoted master
# that has no replica yet refuses orders (they fail over to other masters' segments) instead of
# committing orders that no replica can acknowledge.
#
# Env: CLUSTER_PORTS ("p1 p2 …": masters first, then replicas; default: free ports, each with
#      port+10000 free for the cluster bus), CLUSTER_MASTERS (3), CLUSTER_REPLICAS (1),
#      CLUSTER_NODE_TIMEOUT (1000), CLUSTER_DIR (a new temp dir; `start` prints it, `stop` and
#      `status` need it), REDIS_SERVER (redis-server), REDIS_CLI (redis-cli),
#      CLUSTER_WAIT_S (30: longest wait for the cluster to form).
set -euo pipefail

redis_server=${REDIS_SERVER:-redis-server}
redis_cli=${REDIS_CLI:-redis-cli}
masters=${CLUSTER_MASTERS:-3}
replicas=${CLUSTER_REPLICAS:-1}
node_timeout=${CLUSTER_NODE_TIMEOUT:-1000}
min_replicas=${CLUSTER_MIN_REPLICAS_TO_WRITE:-0}
max_lag=${CLUSTER_MIN_REPLICAS_MAX_LAG:-2}
wait_s=${CLUSTER_WAIT_S:-30}
mode=${1:-foreground}
[ $# -gt 0 ] && shift

die() { echo "cluster.sh: $*" >&2; exit 1; }

# port_free P: nothing listens on 127.0.0.1:P.
port_free() { ! (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_ports N: N free ports (each with its bus port +10000 free too) into $ports.
pick_ports() {
  local n=$1 p i
  ports=""
  for ((i = 0; i < 400 && $(wc -w <<<"$ports") < n; i++)); do
    # Below 22768, so that the bus port stays below the kernel's ephemeral range (32768+),
    # where an outgoing connection could take it between this check and the node's start.
    p=$((12000 + (RANDOM * 32768 + RANDOM) % 10768))
    [[ " $ports " == *" $p "* ]] && continue
    port_free "$p" && port_free $((p + 10000)) && ports+="$p "
  done
  [ "$(wc -w <<<"$ports")" -eq "$n" ] || die "could not find $n free ports"
  ports=${ports% }
}

cli() { "$redis_cli" -h 127.0.0.1 -p "$1" "${@:2}"; }

# stop_dir DIR: kills the nodes recorded in DIR (TERM, KILL after 3 s) and removes DIR.
stop_dir() {
  local dir=$1 pid i alive
  [ -d "$dir" ] || return 0
  # CONT too: a node a test left stopped (SIGSTOP) could not act on the TERM.
  for pid in $(cat "$dir"/*/pid 2>/dev/null); do
    kill "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 30; i++)); do
    alive=0
    for pid in $(cat "$dir"/*/pid 2>/dev/null); do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in $(cat "$dir"/*/pid 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}

# formed PORT…: every node says cluster_state:ok and knows every node as connected, with as
# many masters (that own slots) and replicas as asked for.
formed() {
  local p info nodes
  for p in "$@"; do
    info=$(cli "$p" CLUSTER INFO 2>/dev/null) || return 1
    grep -q '^cluster_state:ok' <<<"$info" || return 1
    nodes=$(cli "$p" CLUSTER NODES 2>/dev/null) || return 1
    [ "$(grep -c ' connected' <<<"$nodes")" -eq "$#" ] || return 1
    [ "$(awk '$3 ~ /master/ && $9 != "" {n++} END {print n+0}' <<<"$nodes")" -eq "$masters" ] || return 1
    [ "$(grep -c 'slave' <<<"$nodes")" -eq $((masters * replicas)) ] || return 1
    # A replica counts once its link is up and the initial sync is over (WAIT needs it).
    info=$(cli "$p" INFO replication 2>/dev/null) || return 1
    if grep -q '^role:slave' <<<"$info"; then
      grep -q '^master_link_status:up' <<<"$info" || return 1
      grep -q '^master_sync_in_progress:0' <<<"$info" || return 1
    elif grep -q '^min_slaves_good_slaves:0' <<<"$info"; then
      return 1 # with min-replicas-to-write: a master that does not accept writes yet
    fi
  done
  return 0
}

# start_node PORT: redis-server of node PORT in $dir/PORT (its nodes.conf there too), daemonized.
# Its stdin is /dev/null: redis-server 7.0 started daemonized with fd 0 closed (a CI runner
# without stdin) crashes at start ("Error registering the readable event for the module pipe").
start_node() {
  local p=$1
  mkdir -p "$dir/$p"
  "$redis_server" --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --daemonize yes \
    --pidfile "$dir/$p/pid" --logfile "$dir/$p/redis.log" --save "" --appendonly no \
    --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
    --cluster-node-timeout "$node_timeout" --cluster-require-full-coverage no \
    --cluster-replica-validity-factor 0 --repl-diskless-sync-delay 0 \
    --min-replicas-to-write "$min_replicas" --min-replicas-max-lag "$max_lag" </dev/null >/dev/null ||
    die "redis-server on port $p did not start (see $dir/$p/redis.log)"
}
# answers PORT: node PORT answers PING within 5 s.
answers() {
  local i
  for ((i = 0; i < 50; i++)); do cli "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "node $1 does not answer (see $dir/$1/redis.log)"
}
# wait_formed: formed, waited for up to $wait_s.
wait_formed() {
  local i
  # shellcheck disable=SC2086
  for ((i = 0; i < wait_s * 10; i++)); do formed $ports && return 0; sleep 0.1; done
  # shellcheck disable=SC2086
  formed $ports
}
# load_dir: $dir, $ports and the settings of the cluster in CLUSTER_DIR.
load_dir() {
  dir=${CLUSTER_DIR:-}
  [ -n "$dir" ] && [ -r "$dir/ports" ] && [ -r "$dir/settings" ] || die "$mode: set CLUSTER_DIR (printed by start)"
  ports=$(cat "$dir/ports")
  read -r masters replicas node_timeout min_replicas max_lag < <(sed 's/[a-z_]*=//g' "$dir/settings")
}

# start_cluster: starts the nodes in $dir, creates the cluster, waits for it. Sets $url.
start_cluster() {
  local total=$((masters * (1 + replicas))) p
  [ "$masters" -ge 3 ] || die "redis-cli --cluster create needs at least 3 masters"
  command -v "$redis_server" >/dev/null || die "no $redis_server (Debian package redis-server)"
  command -v "$redis_cli" >/dev/null || die "no $redis_cli (Debian package redis-tools)"
  if [ -n "${CLUSTER_PORTS:-}" ]; then
    ports=$CLUSTER_PORTS
    [ "$(wc -w <<<"$ports")" -eq "$total" ] || die "CLUSTER_PORTS needs $total ports"
    for p in $ports; do port_free "$p" || die "port $p is in use"; done
  else
    pick_ports "$total"
  fi
  # What restart and wait need later.
  printf 'masters=%s replicas=%s node_timeout=%s min_replicas=%s max_lag=%s\n' "$masters" \
    "$replicas" "$node_timeout" "$min_replicas" "$max_lag" >"$dir/settings"
  for p in $ports; do start_node "$p"; done
  for p in $ports; do answers "$p"; done
  local addrs=()
  for p in $ports; do addrs+=("127.0.0.1:$p"); done
  "$redis_cli" --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
    >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; die "redis-cli --cluster create failed"; }
  wait_formed || die "the cluster did not reach cluster_state:ok within ${wait_s}s"
  url="redis-cluster://$(sed 's/ /,/g; s/\([0-9]\+\)/127.0.0.1:\1/g' <<<"$ports")"
  printf '%s\n' "$url" >"$dir/url"
  printf '%s\n' "$ports" >"$dir/ports"
}

case "$mode" in
  stop)
    [ -n "${CLUSTER_DIR:-}" ] || die "stop: set CLUSTER_DIR (printed by start)"
    stop_dir "$CLUSTER_DIR"
    ;;
  restart)
    load_dir
    [[ " $ports " == *" ${1:-} "* ]] || die "restart: ${1:-no port} is not a node of the cluster in $dir"
    start_node "$1"
    answers "$1"
    ;;
  wait)
    load_dir
    wait_formed || die "the cluster in $dir is not whole after ${wait_s}s"
    ;;
  status)
    [ -n "${CLUSTER_DIR:-}" ] && [ -r "$CLUSTER_DIR/ports" ] || die "status: set CLUSTER_DIR"
    for p in $(cat "$CLUSTER_DIR/ports"); do
      if cli "$p" CLUSTER NODES 2>/dev/null; then exit 0; fi
    done
    die "no node answers"
    ;;
  start | run | foreground)
    dir=${CLUSTER_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/inventoryd-cluster.XXXXXX")}
    mkdir -p "$dir"
    if [ "$mode" = start ]; then
      trap 'stop_dir "$dir"' ERR
      start_cluster
      trap - ERR
      echo "CLUSTER_URL=$url"
      echo "CLUSTER_PORTS=\"$ports\""
      echo "CLUSTER_DIR=$dir"
      exit 0
    fi
    trap 'stop_dir "$dir"' EXIT
    trap 'exit 130' INT TERM
    start_cluster
    export CLUSTER_URL=$url CLUSTER_PORTS=$ports CLUSTER_DIR=$dir
    if [ "$mode" = run ]; then
      [ $# -gt 0 ] || die "run: no command given"
      set +e
      "$@"
      rc=$?
      set -e
      exit $rc
    fi
    echo "cluster up: $url (dir $dir); Ctrl-C stops it"
    while :; do sleep 3600; done
    ;;
  *) die "usage: cluster.sh [start|stop|status|restart PORT|wait|run CMD…]" ;;
esac
