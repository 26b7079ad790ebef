#!/usr/bin/env bash
# The randomized concurrent-history test (Jepsen-style; docs/reliability.md "Randomized history
# test"). Starts its own redis-server (AOF, appendfsync always) and 3 inventoryd instances
# (loadtest/lib.sh), runs loadtest/chaos.py — many client threads sending a seeded random mix
# of PUT (1..16 segments, never the count of the SKU's last PUT), restock, orders with and
# without Idempotency-Key, cancels, DELETE of a SKU, DELETE followed at once by a PUT, and
# status reads straight to the instances, on SKU names that alias (x, x:1, x:2, x:3: in key
# schema 1 SKU x:k's keys were segment k's of x), and the order lifecycle of SPEC §11: the
# instances run with --trust-body-user-id, the SKUs have a per-user limit and holds, holds
# only, a limit only or neither (PUT with limit_per_user / reservation_ttl_s 1–2 s; PATCHes
# raise a limit, never lower it, and change the TTL), keyed orders come from a pool of 5 users,
# holds are confirmed before, racing and after their expiry, cancelled, or left to expire (at
# the end the checker waits out the last ones, clients stopped) — retrying like real clients,
# every attempt recorded in history.jsonl — while this script is the nemesis: at random moments it kill -9s
# an instance and restarts it, SIGSTOPs one past its lock lease and SIGCONTs it, or kill -9s
# redis-server and restarts it from its AOF. chaos.py's damager is the nemesis of the data:
# every 2–6 s it writes a damaged value (10.0, ' 5', 1e3, abc: "{v}.0", " {v}", "{v}e0", 1e3,
# abc of the value v) into one counter (stock, sver, cnt t/s/o) of one settled segment, holds it
# 1–3 s and writes the value back (at once when a checkpoint is due); the checker requires that
# nothing but the repair wrote that counter meanwhile and that the segment, the counter put back,
# still satisfies §8 (scripts that do not read it may run), that the SKU's orders were not mostly
# 5xx while its other segments had stock, and every status answer meanwhile to satisfy §8 or be
# an error. At checkpoints (nemesis paused, clients idle, instances ready with nothing in
# flight, no segment lock held) and at the end chaos.py checks SPEC §8 from Redis directly
# (plus loadtest/verify.sh per SKU) against the history, and the answers themselves; since
# SPEC §11 also that no user is over the limit and the users' entries name their live orders,
# that holds end within 1.5 s of expires_at, that confirms and cancels agree with the records,
# and that outside the faults a SKU's orders are not mostly 5xx (docs/reliability.md).
# The order log and its sink (issue 29, "The net"; CH_SINK=0 turns them off): a private
# MariaDB (lib.sh shop_db_setup) and one inventory-sink (--maintain-ms 250) beside the
# instances, which run with --order-log; the nemesis also kill -9s the sink and restarts it
# after 1-4 s (sink-kill9; meanwhile the clients send PUTs, about half of them shrinking the
# layout, and DELETEs 50 times as often), and restarts an instance without --order-log, later
# with it again (flag-restart: its changes are counted in Redis and the sink must backfill
# them). At the end, the nemesis still held, chaos.py's check "database" waits until the sink
# has caught up (its /metrics lag and pending 0; in Redis every stream below max(segments, hwm,
# lhwm), dropped segments' included, drained, no unlogged count left; ≤ 60 s) and runs
# `inventory-sink reconcile --sku S` for every SKU: a difference is a violation (only a
# backfilled row of an order a later PUT or DELETE reset out of Redis is excused).
# The waiting room (issue 32, SPEC §16; CH_QUEUE=0 turns it off): the instances also run with
# --queue-key-file (64 random hex digits, the same file for all) and --user-header X-User
# --trusted-proxies 127.0.0.1/32 (a join needs a verified user); chaos.py adds two SKUs with a
# waiting room and queue clients that join, poll and order with tickets, pause admission and
# change its rate (loadtest/chaos_queue.py); its checks queue-places, queue-fifo,
# queue-tickets, queue-budget, queue-sold-out and queue-pause run at every checkpoint
# (docs/reliability.md "The waiting room in the history": which hold across which faults).
# Carts and limit groups (issue 33, SPEC §17; CH_CART=0 turns them off): chaos.py adds four SKUs
# sold in carts of 2-4 items (one with holds: carts confirmed, cancelled, extended, expiring) and
# six sizes of one style in a limit group of 1 unit per user, bought in single orders and carts
# by a few users, with cart clients beside the others (loadtest/chaos_cart.py); its checks
# cart-whole, cart-answers and group-limit run at every checkpoint.
# Everything it starts is stopped on exit, also on failure or interrupt.
#
# --cluster: the same history against a local Redis Cluster instead (scripts/cluster.sh: 3
# masters with a replica each, min-replicas-to-write 1) and the instances with
# --redis-replica-acks 1. Its nemesis kill -9s a master — its replica is promoted — and brings
# the dead node back once the replica took over (it rejoins as the new master's replica);
# sometimes it first cuts the replica off (SIGSTOP, its replication link closed by the master),
# so the promoted replica has only what it had then; and it kill -9s and SIGSTOPs instances
# as above. Half of the master faults, and always the first fault of a cluster run, hit the
# master holding a SKU's own keys (the slot of inv:2:{<sku>}:meta, CLUSTER KEYSLOT, its master
# from CLUSTER NODES): its layout, versions, restock intents and Idempotency-Key claims. The
# checker reads each key from the master of its slot (loadtest/resp.py; verify.sh's
# inventory-check asks the cluster for each key's slot).
#
# Usage: loadtest/chaos.sh [--short | --long] [--cluster] [--seed N] [--out DIR]
#   --short    (default) 60 s of traffic, a checkpoint every 12 s and one at the end; about
#              80 s in all (what CI runs). With --cluster: 30 s of traffic, a checkpoint at
#              15 s and one at the end; about 50 s with the cluster's start
#   --long     600 s of traffic, a checkpoint every 30 s; about 11 min
#   --cluster  on a Redis Cluster, with master failovers among the faults (above)
#   --seed N   replay the random choices of an earlier run (clients and nemesis; the timing,
#              and so the interleaving, differs from run to run). Default: random, printed.
#   --out DIR  results directory (default loadtest/results/chaos-<UTC time>)
# Results (with the sink also reconcile-<sku>.txt, logs/sink.log, and run/mysql, MariaDB's
# data, only when a check failed): SUMMARY.md (ops by type and answer, nemesis events, each counter damage with what
# was written meanwhile, Redis calls, checkpoints, every check with the first violations and
# their history lines), history.jsonl, nemesis.jsonl, run.log, verify-<checkpoint>-<sku>.txt,
# logs/ (redis, instances).
# Redis calls: at each checkpoint every instance's /metrics must have
# inventory_order_redis_calls_max ≤ inventory_order_redis_call_budget (issue 18 item 2; "not
# available" when the binary exports neither); on one Redis, INFO commandstats deltas over the
# stretches of traffic give the commands per request of the run (SUMMARY.md).
# What the additions cost (measured on this machine, other builds running): the damager and
# the aliasing SKUs add no time of their own (a repair takes < 10 ms and comes before the
# checkpoint's wait; a damage's checks are arithmetic on the history, < 0.1 s); a SKU master's
# fault is a master fault (~8 s, traffic going on); /metrics at a checkpoint < 0.1 s. --short
# took 64–69 s (3 runs) and --cluster --short 40–47 s (3 runs; 40 s with the damager off).
# The order lifecycle (issue 20): the final checkpoint waits out the last holds (≤ 3.5 s; 2.0–
# 3.3 s measured) and the give sets; the payers' waits are their own. Seed 2020: --short 66.7 s
# before, 68.7 s after (71.2 s with the confirms still in the clients; 75.7–76.5 s with another
# helper's benchmark running, load 6); --cluster --short 41.0 s before, 42.1–43.9 s after.
# The order log and the sink (issue 29): MariaDB's install and start and the sink's start take
# ~3 s, the catch-up wait and 4 reconciles < 1 s, the faults' own pauses (a sink down 1-4 s, a
# restart) are the nemesis's time: --short took 75.8–83.1 s (9 runs, seeds 4242, 777, 31337,
# 2024, 8080, 1212, 3434; load 3–6 from other builds), --cluster --short 46.3–52.0 s (5 runs,
# seeds 5151, 6262, 9191, 7878); with CH_SINK=0 as before.
# The waiting room (issue 32): its crowd's 500 joins take < 1 s before the traffic, its checks
# ~0.4 s per checkpoint (verify.sh of its two SKUs beside them) plus 1 s when a SKU is sold out
# (the sold-out polls): --short took 81.2 s and 77.9 s (seeds 4242, 777; 79.6 s before, seed
# 4242, the same build), --cluster --short 43.2-46.0 s (seeds 4243, 5151, 9191; 40.9 s before).
# Exit status: 0 every check passed; 1 a violation; 2 usage; 3 infrastructure failure.
#
# Env (all optional): BUILD_DIR (build), LT_SKIP_BUILD=1, LT_SKIP_DEPS=1, PYTHON
# (/usr/bin/python3), CH_SEED, CH_DURATION_S, CH_CHECKPOINT_S, CH_CLIENTS (16), CH_SKUS (4),
# CH_LEASE_MS (1000), CH_LOCK_WAIT_MS (500), CH_REDIS_TIMEOUT_MS (500), CH_THREADS (4 per
# instance), CH_CLIENT_TIMEOUT_S (2), CH_THINK_MS (a client's pause between operations, up to;
# 20, long 40), CH_NEMESIS_GAP_MS (the pause between faults, min max: "1500 5000";
# --cluster "1000 3000"),
# CH_NEMESIS=0 (no faults, no damage), CH_DAMAGE_GAP_MS (the pause between counter damages, min
# max: "2000 6000"; "0 0": no damage), CH_PAYERS (8: threads that confirm holds, beside the
# clients), CH_DAMAGE_HOLD_MS (how long a counter stays damaged:
# "1000 3000"), CH_KEY_SCHEMA (2; 1: the keys of binaries before 34f3be8, inv:{S}:… and
# inv:{S:k}:…, to run an old binary with BUILD_DIR), CH_RULES (1; 0 with CH_KEY_SCHEMA=1: no
# sale rules, PATCHes, confirms or --trust-body-user-id, for a binary before issue 20),
# CH_LARGE_ORDERS (0.1: the fraction of orders of 6..100 units, often more than one segment
# holds, SPEC §13; 0: none, the mix before issue 22), CH_STORMS=0 (no bursts of concurrent PUTs), CH_ADMIN_TOKEN, LT_PORT_MIN/MAX, LT_REDIS_PORT, LT_BASE_PORT,
# CH_SINK (1; 0 with CH_KEY_SCHEMA=1 or CH_RULES=0: no order log, sink, MariaDB or check
# "database"), CH_SINK_BIN (the running sink's binary, default the build's; an older one shows
# the check catching what it left: loadtest/README.md; reconcile is always the build's).
# CH_QUEUE (1; 0 with CH_KEY_SCHEMA=1 or CH_RULES=0: no waiting room), CH_QUEUE_CLIENTS (6).
# CH_CART (1; 0 with CH_KEY_SCHEMA=1 or CH_RULES=0: no carts or groups), CH_CART_CLIENTS (3).
# CH_EXTENDS (0.3: the share of the payers' operations that extend a hold instead of confirming
# it, issue 33, check "extends"; 0 with CH_RULES=0: none, for a binary before issue 33).
# With --cluster: CH_REPLICA_ACKS (1: --redis-replica-acks of the instances), CH_MIN_REPLICAS
# (1: the masters' min-replicas-to-write), CH_MASTER_CUT (33: % of the masters' faults that cut
# the replica off first), CH_MASTER_PAUSE (33: % that pause its replication first, link open), CH_CALM_S (5; 0 without --cluster: no fault starts in the last S
# seconds of traffic before a checkpoint). Only acks 1 is a checked mode: with 0 an order
# answered 201 may be lost in a failover (docs/scaling.md, "The loss window"), and the checker
# reports it as a violation — which is how it is shown to catch one (loadtest/README.md).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest

mode=short seed=${CH_SEED:-} out="" cluster=0
while [ $# -gt 0 ]; do
  case "$1" in
    --short) mode=short; shift ;;
    --long) mode=long; shift ;;
    --cluster) cluster=1; shift ;;
    --seed) seed=${2:-}; shift 2 || { echo "chaos.sh: --seed needs a number" >&2; exit 2; } ;;
    --seed=*) seed=${1#*=}; shift ;;
    --out) out=${2:-}; shift 2 || { echo "chaos.sh: --out needs a directory" >&2; exit 2; } ;;
    --out=*) out=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$seed" ] || seed=$(((RANDOM << 15 | RANDOM) % 1000000))
[[ $seed =~ ^[0-9]+$ ]] || { echo "chaos.sh: --seed must be a non-negative integer" >&2; exit 2; }

if [ "$mode" = long ]; then
  duration=${CH_DURATION_S:-600} every=${CH_CHECKPOINT_S:-30} think=${CH_THINK_MS:-40}
elif [ "$cluster" = 1 ]; then
  duration=${CH_DURATION_S:-30} every=${CH_CHECKPOINT_S:-15} think=${CH_THINK_MS:-20}
else
  duration=${CH_DURATION_S:-60} every=${CH_CHECKPOINT_S:-12} think=${CH_THINK_MS:-20}
fi
# No fault starts in the last $calm s of traffic before a checkpoint: a master's fault takes
# ~8 s (failover, restart, resync), and a checkpoint waits for the fault under way.
calm=${CH_CALM_S:-$([ "$cluster" = 1 ] && echo 5 || echo 0)}
build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=$build_dir/bin/inventoryd
py=${PYTHON:-/usr/bin/python3}
instances=3
port_min=${LT_PORT_MIN:-20000}
port_max=${LT_PORT_MAX:-32000}
acks=${CH_REPLICA_ACKS:-1}
min_replicas=${CH_MIN_REPLICAS:-1}
cut_pct=${CH_MASTER_CUT:-33}
pause_pct=${CH_MASTER_PAUSE:-33}
lock_wait=${CH_LOCK_WAIT_MS:-500}
lease=${CH_LEASE_MS:-1000}
redis_timeout=${CH_REDIS_TIMEOUT_MS:-500}
threads=${CH_THREADS:-4}
token=${CH_ADMIN_TOKEN:-chaos-admin-token}
key_schema=${CH_KEY_SCHEMA:-2}
[[ $key_schema =~ ^[12]$ ]] || { echo "chaos.sh: CH_KEY_SCHEMA is 1 or 2" >&2; exit 2; }
rules=${CH_RULES:-$([ "$key_schema" = 2 ] && echo 1 || echo 0)}
[[ $rules =~ ^[01]$ ]] || { echo "chaos.sh: CH_RULES is 0 or 1" >&2; exit 2; }
# The order log and its sink: on by default, off for the old binaries CH_KEY_SCHEMA=1 / CH_RULES=0
# run (they predate the sink's database check).
sink_bin=$build_dir/bin/inventory-sink
sink=${CH_SINK:-1}
[[ $sink =~ ^[01]$ ]] || { echo "chaos.sh: CH_SINK is 0 or 1" >&2; exit 2; }
[ "$key_schema$rules" = 21 ] || [ -n "${CH_SINK:-}" ] || sink=0
# The waiting room (issue 32): on by default, off for the old binaries CH_KEY_SCHEMA=1 / CH_RULES=0.
queue=${CH_QUEUE:-1}
[[ $queue =~ ^[01]$ ]] || { echo "chaos.sh: CH_QUEUE is 0 or 1" >&2; exit 2; }
[ "$key_schema$rules" = 21 ] || [ -n "${CH_QUEUE:-}" ] || queue=0
# Carts and limit groups (issue 33): on by default, off for the old binaries.
cart=${CH_CART:-1}
[[ $cart =~ ^[01]$ ]] || { echo "chaos.sh: CH_CART is 0 or 1" >&2; exit 2; }
[ "$key_schema$rules" = 21 ] || [ -n "${CH_CART:-}" ] || cart=0
# Hold extensions (issue 33): a share of the payers' operations, off for the old binaries.
extends=${CH_EXTENDS:-$([ "$key_schema$rules" = 21 ] && echo 0.3 || echo 0)}
[[ $extends =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || { echo "chaos.sh: CH_EXTENDS is a fraction, 0..1" >&2; exit 2; }
large=${CH_LARGE_ORDERS:-0.1}
[[ $large =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || { echo "chaos.sh: CH_LARGE_ORDERS is a fraction, 0..1" >&2; exit 2; }
damage_gap=${CH_DAMAGE_GAP_MS:-2000 6000}
damage_hold=${CH_DAMAGE_HOLD_MS:-1000 3000}
[ "${CH_NEMESIS:-1}" != 0 ] || damage_gap="0 0"
if [ "$cluster" = 1 ]; then
  read -r gap_min gap_max <<<"${CH_NEMESIS_GAP_MS:-1000 3000}"
else
  read -r gap_min gap_max <<<"${CH_NEMESIS_GAP_MS:-1500 5000}"
fi

stamp=$(date -u +%Y%m%dT%H%M%SZ)
flag=""
[ "$cluster" = 0 ] || flag=" --cluster"
res=${out:-$lt/results/chaos-${flag:+cluster-}$stamp}
mkdir -p "$res/logs"
res=$(cd "$res" && pwd)
run_dir=$res/run ctl=$res/ctl
rm -rf "$run_dir" "$ctl"
mkdir -p "$run_dir" "$ctl"
: >"$res/nemesis.jsonl"
lib_name=chaos
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

py_pid="" sink_pid="" sink_port=""
# shellcheck disable=SC2317  # called by lib.sh's exit trap
cleanup_hook() {
  : >"$ctl/done" 2>/dev/null || true
  stop_pid "$sink_pid" 50
}
install_cleanup

[ "${LT_SKIP_DEPS:-0}" = 1 ] || "$root/scripts/deps.sh"
for tool in redis-server redis-cli curl "$py"; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/deps.sh installs it)"
done
if [ "$sink" = 1 ]; then
  for tool in mariadbd mariadb-install-db mariadb; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/deps.sh installs mariadb-server)"
  done
fi
targets=(inventoryd)
[ "$sink" = 0 ] || targets+=(inventory-sink)
[ "${LT_SKIP_BUILD:-0}" = 1 ] || build_targets "${targets[@]}"
[ -x "$bin" ] || die "no inventoryd binary at $bin"
[ "$sink" = 0 ] || [ -x "$sink_bin" ] || die "no inventory-sink binary at $sink_bin"

replay="loadtest/chaos.sh --$mode$flag --seed $seed"
[ "$key_schema" = 2 ] || replay="CH_KEY_SCHEMA=$key_schema BUILD_DIR=$build_dir $replay"
[ "$rules" = "$([ "$key_schema" = 2 ] && echo 1 || echo 0)" ] || replay="CH_RULES=$rules $replay"
[ "$large" = 0.1 ] || replay="CH_LARGE_ORDERS=$large $replay"
[ "$sink" = "$([ "$key_schema$rules" = 21 ] && echo 1 || echo 0)" ] || replay="CH_SINK=$sink $replay"
[ "$queue" = "$([ "$key_schema$rules" = 21 ] && echo 1 || echo 0)" ] || replay="CH_QUEUE=$queue $replay"
[ "$cart" = "$([ "$key_schema$rules" = 21 ] && echo 1 || echo 0)" ] || replay="CH_CART=$cart $replay"
log "seed $seed ($mode${flag:+, cluster}: $duration s of traffic, checkpoint every $every s); replay: $replay"
log "results in $res"

inst_flags=(--admin-token "$token" --lock-lease-ms "$lease" --redis-timeout-ms "$redis_timeout")
# The orders' users are their bodies' user_id (SPEC §11: development only, which a test is).
[ "$rules" = 0 ] || inst_flags+=(--trust-body-user-id)
# The waiting room's users are verified (SPEC §16): the X-User header, believed from loopback;
# its tickets are signed with one key file, the same for every instance.
if [ "$queue" = 1 ]; then
  # 64 hex digits of 32 random bytes (the key file may hold no NUL byte)
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run_dir/queue.key"
  inst_flags+=(--queue-key-file "$run_dir/queue.key" --user-header X-User --trusted-proxies 127.0.0.1/32)
fi
if [ "$cluster" = 1 ]; then
  command -v "$py" >/dev/null 2>&1 || die "no $py"
  cluster_up 3 1 "$min_replicas"
  redis_url_override=$redis_url
  inst_flags+=(--redis-replica-acks "$acks")
  setup="Redis: a cluster of 3 masters + 3 replicas (min-replicas-to-write $min_replicas, node timeout 1 s); inventoryd --redis-replica-acks $acks$([ "$acks" -ge 1 ] || echo " (not a checked mode: an order answered 201 may be lost in a failover)")."
  where=(--redis-cluster "$redis_url")
else
  # Redis with its AOF fsynced before every reply: a kill -9 of Redis then loses no acknowledged
  # write, so a missing acknowledged order is the service's fault, not the test's.
  redis_args=(--appendonly yes --appendfsync always)
  start_redis
  setup="Redis: one redis-server, AOF appendfsync always."
  where=(--redis-port "$redis_port")
fi
# The order log and its sink (issue 29, "The net"): a private MariaDB (lib.sh shop_db_setup),
# one inventory-sink, the instances with --order-log, except while the nemesis has restarted
# one without it (nolog[i]=1: its changes are counted in Redis and backfilled by the sink).
nolog=()
for ((i = 0; i < instances; i++)); do nolog[i]=0; done
# log_flag I: the order-log flag of instance I as it runs now.
log_flag() { [ "$sink" = 0 ] || [ "${nolog[$1]}" = 1 ] || echo --order-log; }
if [ "$cluster" = 1 ]; then sink_redis=$redis_url; else sink_redis=redis://127.0.0.1:$redis_port; fi
# start_sink: inventory-sink (consumer chaos-sink, kept across restarts) on sink_port (kept,
# unless it cannot bind it), ready when /metrics answers; its port in ctl/sink_port for chaos.py.
start_sink() {
  local attempt
  for attempt in 1 2 3; do
    if [ -z "$sink_port" ] || [ "$attempt" -gt 1 ]; then
      pick_port || die "no free port for inventory-sink"; sink_port=$picked
    fi
    INVENTORY_SINK_DB_URL=$shop_db_url "${CH_SINK_BIN:-$sink_bin}" --redis "$sink_redis" --metrics-port "$sink_port" \
      --consumer chaos-sink --maintain-ms 250 --claim-idle-ms 3000 --log-level info \
      2>>"$res/logs/sink.log" &
    sink_pid=$!
    if wait_ready "$sink_pid" 100 curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$sink_port/metrics"; then
      echo "$sink_port" >"$ctl/sink_port"
      return 0
    fi
    stop_pid "$sink_pid" 20
  done
  die "inventory-sink did not start (see $res/logs/sink.log)"
}
if [ "$sink" = 1 ]; then
  t_db=$(date +%s%3N)
  shop_db_setup
  start_sink
  setup+=" Order log: every instance with --order-log (the nemesis restarts one without it, and later with it again), one inventory-sink (--maintain-ms 250) into MariaDB $(lock_db_sql 'SELECT VERSION()' 2>/dev/null) (started in $(($(date +%s%3N) - t_db)) ms)."
  log "MariaDB on $lock_db_port, inventory-sink /metrics on $sink_port ($(($(date +%s%3N) - t_db)) ms to start both)"
fi
pick_instance_ports
# shellcheck disable=SC2046  # the flag or nothing
start_servers inventoryd "$instances" "$threads" "${inst_flags[@]}" $(log_flag 0)
log "${redis_url:-redis-server on $redis_port (AOF always)}, inventoryd on ${inst_ports[*]} (lease $lease ms, lock wait $lock_wait ms${redis_url:+, replica acks $acks})"

now_ms() { date +%s%3N; }
# sleep_ms N
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }
# rnd A B: sets r to a random integer in [A, B] from the seeded $RANDOM (no subshell, so the
# sequence stays the seed's).
rnd() { r=$(($1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1))); }
# event NAME TARGET [DETAIL]: one line of nemesis.jsonl.
event() {
  printf '{"t_ms":%s,"ev":"%s","target":"%s","detail":"%s"}\n' "$(now_ms)" "$1" "$2" "${3:-}" >>"$res/nemesis.jsonl"
}
# restart_instance I: inventoryd I again on its port, ready (/readyz) within 10 s.
restart_instance() {
  local i=$1
  # shellcheck disable=SC2046  # the flag or nothing
  launch_instance "$i" "$threads" "${inst_flags[@]}" $(log_flag "$i")
  inst_pids[i]=$pid
  wait_ready "$pid" 100 curl -fsS --max-time 1 "http://127.0.0.1:${inst_ports[i]}/readyz" \
    || die "inventoryd $i did not come back on port ${inst_ports[i]} (see $res/logs/inventoryd$i.log)"
}
# kill_instance I: kill -9 of inventoryd I, restarted after 200–2000 ms.
kill_instance() {
  local i=$1 ms
  rnd 200 2000; ms=$r
  event kill9 "inventoryd$i" "down ${ms} ms"
  kill -KILL "${inst_pids[i]}" 2>/dev/null || true
  wait "${inst_pids[i]}" 2>/dev/null || true
  sleep_ms "$ms"
  restart_instance "$i"
  event back "inventoryd$i"
}
# flag_restart I (with the sink): kill -9 of inventoryd I, restarted at once without
# --order-log when it had it, with it again when it had not (issue 29 item 4: instances
# restarted with differing flags; the sink must find the unlogged changes and backfill them).
flag_restart() {
  local i=$1 how
  if [ "${nolog[i]}" = 1 ]; then nolog[i]=0 how="with --order-log again"; else nolog[i]=1 how="without --order-log"; fi
  event flag-restart "inventoryd$i" "kill -9, restarted $how"
  kill -KILL "${inst_pids[i]}" 2>/dev/null || true
  wait "${inst_pids[i]}" 2>/dev/null || true
  restart_instance "$i"
  event back "inventoryd$i"
}
# sink_kill (with the sink): kill -9 of inventory-sink, restarted after 1-4 s: the clients'
# PUTs (shrinking ones among them, and storms) and DELETEs meanwhile — 50 times as frequent
# while ctl/sink_down exists — drop segments whose logs it has not read; those logs must stay
# until it has drained them (docs/design.md "How the log and the sink agree").
sink_kill() {
  local ms
  rnd 1000 4000; ms=$r
  event sink-kill9 sink "down ${ms} ms"
  kill -KILL "$sink_pid" 2>/dev/null || true
  wait "$sink_pid" 2>/dev/null || true
  : >"$ctl/sink_down"
  sleep_ms "$ms"
  rm -f "$ctl/sink_down"
  start_sink
  event back sink
}
# stop_instance I: SIGSTOP of inventoryd I past its lease, and often past an Idempotency-Key
# claim's age limit too (lock wait + lease + 2 × Redis timeout), after which another request
# may take the claim over; then SIGCONT.
stop_instance() {
  local i=$1 ms
  rnd $((lease * 2)) $((lease * 5)); ms=$r
  event sigstop "inventoryd$i" "stopped ${ms} ms (lease $lease ms)"
  kill -STOP "${inst_pids[i]}"
  sleep_ms "$ms"
  kill -CONT "${inst_pids[i]}"
  event back "inventoryd$i"
}
# restart_redis: kill -9 of redis-server, restarted from its AOF after 200–1500 ms.
restart_redis() {
  local ms
  rnd 200 1500; ms=$r
  event redis-kill9 redis "down ${ms} ms + AOF load"
  kill -KILL "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=""
  sleep_ms "$ms"
  launch_redis || die "redis-server did not restart (see $res/logs/redis.log)"
  event back redis
}
# master_fault (--cluster): kill -9 of one of the masters; its replica is promoted; then the
# dead node is brought back (lib.sh node_back: it rejoins as the promoted one's replica). In
# CH_MASTER_CUT % of them (33) the replica is cut off first: stopped (SIGSTOP) and its
# replication link closed by the master (CLIENT KILL TYPE replica) 200–900 ms before the kill,
# let go (SIGCONT) after it, and promoted with only what it had when cut off. Whatever the
# master took in between is lost with it: with min-replicas-to-write 1 it takes nothing
# (NOREPLICAS), and with --redis-replica-acks 1 nothing it took is answered 201 (its WAIT times
# out: 503 outcome unknown). A plain kill -9 loses nothing here even with acks 0: on loopback
# the replica still reads what the master had written to the socket.
# In CH_MASTER_PAUSE % (33) the replica's replication is paused instead (issue 29): the replica
# is stopped (SIGSTOP) with its link left open, so the master goes on taking writes (within
# min-replicas-max-lag) that never reach it: for 1-2.5 s every order on that master, the parts
# of multi-segment orders among them, waits for an ack that cannot come (WAIT times out: 503
# outcome unknown); then the master is killed and the replica, let go, is promoted without
# them. An order answered 201 must still be whole in Redis, and a multi-segment order whole
# or absent.
# master_fault [PORT NAME WHY]: that master (default: one chosen by the seed), its events named
# NAME-kill9 / NAME-cut-kill9 / NAME-pause-kill9 (default master), WHY leading their detail.
master_fault() {
  local m=${1:-} name=${2:-master} why=${3:-} cut ms rep ports
  if [ -z "$m" ]; then
    read -ra ports <<<"$(cluster_masters)"
    [ "${#ports[@]}" -gt 0 ] || die "no master answers (see $res/logs/cluster.log)"
    rnd 0 $((${#ports[@]} - 1)); m=${ports[r]}
  fi
  rnd 0 99; cut=$r
  rnd 200 900; ms=$r
  if [ "$cut" -ge $((100 - pause_pct)) ]; then
    rep=$(replica_of "$m")
    [ -n "$rep" ] || die "master $m has no replica"
    rnd 1000 2500; ms=$r
    event "$name-pause-kill9" "redis-$m" "${why}replica $rep's replication paused (SIGSTOP, link open) ${ms} ms before the kill"
    kill -STOP "$(node_pid "$rep")"
    sleep_ms "$ms"
    kill -KILL "$(node_pid "$m")"
    kill -CONT "$(node_pid "$rep")"
  elif [ "$cut" -lt "$cut_pct" ]; then
    rep=$(replica_of "$m")
    [ -n "$rep" ] || die "master $m has no replica"
    event "$name-cut-kill9" "redis-$m" "${why}replica $rep stopped and cut off ${ms} ms before the kill"
    kill -STOP "$(node_pid "$rep")"
    redis-cli -p "$m" CLIENT KILL TYPE replica >/dev/null 2>&1 || true
    sleep_ms "$ms"
    kill -KILL "$(node_pid "$m")"
    kill -CONT "$(node_pid "$rep")"
  else
    event "$name-kill9" "redis-$m" "${why}its replica takes over"
    kill -KILL "$(node_pid "$m")"
  fi
  node_back "$m"
  event back "redis-$m"
}
# meta_key SKU: the key of the SKU's layout, in the key schema of the binary under test.
meta_key() { if [ "$key_schema" = 1 ]; then echo "inv:{$1}:meta"; else echo "inv:2:{$1}:meta"; fi; }
# sku_master_fault (--cluster): master_fault of the master serving a SKU's own keys — the slot
# of its meta (CLUSTER KEYSLOT), that slot's master (CLUSTER NODES) —, the SKU chosen by the
# seed among chaos.py's (ctl/skus); a random master when none is known yet.
sku_master_fault() {
  local skus sku slot p m=""
  skus=()
  [ -s "$ctl/skus" ] && mapfile -t skus <"$ctl/skus"
  [ "${#skus[@]}" -gt 0 ] || { master_fault; return; }
  rnd 0 $((${#skus[@]} - 1)); sku=${skus[r]}
  for p in $cluster_ports; do
    slot=$(redis-cli -p "$p" CLUSTER KEYSLOT "$(meta_key "$sku")" 2>/dev/null) || continue
    m=$(slot_owner "$p" "$slot" 2>/dev/null) || m=""
    [ -n "$m" ] && break
  done
  [ -n "$m" ] || { master_fault; return; }
  master_fault "$m" sku-master "the master of $sku's own keys (slot $slot of $(meta_key "$sku")); "
}
# One fault, chosen and timed by the seed; when it returns, everything is running again.
# With the sink, 30 % of the faults after the first are the sink's: sink-kill9 15 %,
# flag-restart of an instance 15 %; the others (and the first) are drawn again as without it.
# On one Redis: kill -9 of an instance 30 %, SIGSTOP of one 45 %, Redis restart 25 %. On a
# cluster: a master's fault 45 % — the master of a SKU's own keys 22 % (and always the first),
# a random master 23 % —, SIGSTOP of an instance 30 %, kill -9 25 %. (chaos.py damages counters
# on its own schedule, the damager: docs/reliability.md.)
faults_done=0
fault() {
  local i kind
  rnd 0 99; kind=$r
  rnd 0 $((instances - 1)); i=$r
  if [ "$sink" = 1 ]; then
    if [ "$faults_done" -gt 0 ] && [ "$kind" -lt 30 ]; then
      if [ "$kind" -lt 15 ]; then sink_kill; else flag_restart "$i"; fi
      faults_done=$((faults_done + 1))
      return
    fi
    rnd 0 99; kind=$r
  fi
  if [ "$cluster" = 1 ]; then
    if [ "$faults_done" = 0 ] || [ "$kind" -lt 22 ]; then sku_master_fault
    elif [ "$kind" -lt 45 ]; then master_fault
    elif [ "$kind" -lt 75 ]; then stop_instance "$i"
    else kill_instance "$i"; fi
  elif [ "$kind" -lt 30 ]; then kill_instance "$i"
  elif [ "$kind" -lt 75 ]; then stop_instance "$i"
  else restart_redis; fi
  faults_done=$((faults_done + 1))
}
# reap_crashed: an instance or redis-server that exited although no fault killed it is a
# finding (chaos.py reports the "crash" events with their exit status); it is restarted so that
# the run goes on.
reap_crashed() {
  local i st p
  for ((i = 0; i < instances; i++)); do
    kill -0 "${inst_pids[i]}" 2>/dev/null && continue
    st=0
    wait "${inst_pids[i]}" 2>/dev/null || st=$?
    event crash "inventoryd$i" "exit status $st$([ "$st" -gt 128 ] && echo " (SIG$(kill -l $((st - 128))))")"
    log "inventoryd $i exited by itself (status $st); restarting it"
    restart_instance "$i"
  done
  if [ "$cluster" = 1 ]; then
    for p in $cluster_ports; do
      kill -0 "$(node_pid "$p")" 2>/dev/null && continue
      event crash "redis-$p" "exited (a daemon: no exit status)"
      log "cluster node $p exited by itself; bringing it back"
      node_back "$p"
    done
  elif ! kill -0 "$redis_pid" 2>/dev/null; then
    st=0
    wait "$redis_pid" 2>/dev/null || st=$?
    event crash redis "exit status $st"
    log "redis-server exited by itself (status $st); restarting it"
    launch_redis || die "redis-server did not restart (see $res/logs/redis.log)"
  fi
  if [ "$sink" = 1 ] && ! kill -0 "$sink_pid" 2>/dev/null; then
    st=0
    wait "$sink_pid" 2>/dev/null || st=$?
    event crash sink "exit status $st"
    log "inventory-sink exited by itself (status $st); restarting it"
    start_sink
  fi
}
# hold_still: when chaos.py asks for a checkpoint (ctl/pause.N), says so (paused.N: no fault
# under way, everything running) and waits for resume.N, done, or chaos.py's end (≤ 10 min).
hold_still() {
  local f n i
  for f in "$ctl"/pause.*; do
    [ -e "$f" ] || continue
    n=${f##*/pause.}
    [ -e "$ctl/paused.$n" ] && continue
    event pause "checkpoint $n"
    if [ "$cluster" = 1 ]; then cluster_whole || die "the cluster is not whole (see $res/logs/cluster.log)"; fi
    : >"$ctl/paused.$n"
    for ((i = 0; i < 6000; i++)); do
      [ -e "$ctl/resume.$n" ] || [ -e "$ctl/done" ] && break
      kill -0 "$py_pid" 2>/dev/null || break
      reap_crashed
      sleep 0.1
    done
    event resume "checkpoint $n"
    return 0
  done
  return 1
}

sink_args=()
[ "$sink" = 0 ] || sink_args=(--sink-bin "$sink_bin" --sink-redis "$sink_redis" --db-port "$lock_db_port")
# shellcheck disable=SC2086
INVENTORY_SINK_DB_URL=$shop_db_url "$py" "$lt/chaos.py" --seed "$seed" "${where[@]}" --setup "$setup" --replay "$replay" \
  --ports "$(IFS=,; echo "${inst_ports[*]}")" --token "$token" --out "$res" --ctl "$ctl" \
  --verify "$lt/verify.sh" --duration "$duration" --checkpoint-every "$every" \
  --clients "${CH_CLIENTS:-16}" --skus "${CH_SKUS:-4}" \
  --client-timeout "${CH_CLIENT_TIMEOUT_S:-2}" --think-ms "$think" --storms "${CH_STORMS:-1}" \
  --calm "$calm" ${sink_args[@]+"${sink_args[@]}"} --damage-gap-ms "$damage_gap" --damage-hold-ms "$damage_hold" --key-schema "$key_schema" --rules "$rules" --payers "${CH_PAYERS:-8}" --large-orders "$large" \
  --queue "$queue" --queue-clients "${CH_QUEUE_CLIENTS:-6}" --extends "$extends" --cart "$cart" --cart-clients "${CH_CART_CLIENTS:-3}" &
py_pid=$!
extra_pids+=("$py_pid")

# The nemesis. Its choices come from the seed alone (lib.sh drew ports from $RANDOM before).
RANDOM=$seed
rnd "$gap_min" "$gap_max"
next=$(($(now_ms) + r))
deadline=$(($(now_ms) + (duration * 3 + 600) * 1000))
while kill -0 "$py_pid" 2>/dev/null && [ ! -e "$ctl/done" ]; do
  [ "$(now_ms)" -lt "$deadline" ] || die "chaos.py still running long after its time; stopping"
  reap_crashed
  if hold_still; then
    rnd "$gap_min" "$gap_max"
    next=$(($(now_ms) + r))
    continue
  fi
  if [ "${CH_NEMESIS:-1}" != 0 ] && [ "$(now_ms)" -ge "$next" ] && [ ! -e "$ctl/calm" ]; then
    fault
    rnd "$gap_min" "$gap_max"
    next=$(($(now_ms) + r))
  fi
  sleep 0.1
done
rc=0
wait "$py_pid" || rc=$?
extra_pids=()
# The database's files (~150 MB) are kept only when a check failed.
if [ "$sink" = 1 ] && [ "$rc" = 0 ]; then
  stop_pid "$sink_pid" 50; sink_pid=""
  lock_db_stop
  rm -rf "${run_dir:?}/mysql"
fi
case "$rc" in
  0) log "PASS: every check passed (seed $seed); $res/SUMMARY.md" ;;
  1) log "FAIL: violations found (seed $seed); $res/SUMMARY.md" ;;
  *) log "chaos.py exited with $rc (seed $seed); see $res/run.log" ;;
esac
exit "$rc"
