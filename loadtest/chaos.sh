#!/usr/bin/env bash
# The randomized concurrent-history test (Jepsen-style; docs/reliability.md "Randomized history
# test"). Starts its own redis-server (AOF, appendfsync always) and 3 inventoryd instances
# (loadtest/lib.sh), runs loadtest/chaos.py — many client threads sending a seeded random mix
# of PUT, restock, orders with and without Idempotency-Key, cancels, DELETE of a SKU and status
# reads straight to the instances, retrying like real clients, every attempt recorded in
# history.jsonl — while this script is the nemesis: at random moments it kill -9s an instance
# and restarts it, SIGSTOPs one past its lock lease and SIGCONTs it, or kill -9s redis-server
# and restarts it from its AOF. At checkpoints (nemesis paused, clients idle, instances ready
# with nothing in flight, no segment lock held) and at the end chaos.py checks SPEC §8 from
# Redis directly (plus loadtest/verify.sh per SKU) against the history, and the answers
# themselves. Everything it starts is stopped on exit, also on failure or interrupt.
#
# Usage: loadtest/chaos.sh [--short | --long] [--seed N] [--out DIR]
#   --short    (default) 60 s of traffic, a checkpoint every 12 s and one at the end; about
#              70 s in all (what CI runs)
#   --long     600 s of traffic, a checkpoint every 30 s; about 11 min
#   --seed N   replay the random choices of an earlier run (clients and nemesis; the timing,
#              and so the interleaving, differs from run to run). Default: random, printed.
#   --out DIR  results directory (default loadtest/results/chaos-<UTC time>)
# Results: SUMMARY.md (ops by type and answer, nemesis events, checkpoints, every check with
# the first violations and their history lines), history.jsonl, nemesis.jsonl, run.log,
# verify-<checkpoint>-<sku>.txt, logs/ (redis, instances).
# Exit status: 0 every check passed; 1 a violation; 2 usage; 3 infrastructure failure.
#
# Env (all optional): BUILD_DIR (build), LT_SKIP_BUILD=1, LT_SKIP_DEPS=1, PYTHON
# (/usr/bin/python3), CH_SEED, CH_DURATION_S, CH_CHECKPOINT_S, CH_CLIENTS (16), CH_SKUS (4),
# CH_LEASE_MS (1000), CH_LOCK_WAIT_MS (500), CH_REDIS_TIMEOUT_MS (500), CH_THREADS (4 per
# instance), CH_CLIENT_TIMEOUT_S (2), CH_THINK_MS (a client's pause between operations, up to;
# 20, long 40), CH_NEMESIS_GAP_MS ("1500 5000": the pause between faults, min max),
# CH_NEMESIS=0 (no faults), CH_STORMS=0 (no bursts of concurrent PUTs), CH_ADMIN_TOKEN, LT_PORT_MIN/MAX, LT_REDIS_PORT, LT_BASE_PORT.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lt=$root/loadtest

mode=short seed=${CH_SEED:-} out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --short) mode=short; shift ;;
    --long) mode=long; shift ;;
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
else
  duration=${CH_DURATION_S:-60} every=${CH_CHECKPOINT_S:-12} think=${CH_THINK_MS:-20}
fi
build_dir=${BUILD_DIR:-$root/build}
case "$build_dir" in /*) ;; *) build_dir=$root/$build_dir ;; esac
bin=$build_dir/bin/inventoryd
py=${PYTHON:-/usr/bin/python3}
instances=3
port_min=${LT_PORT_MIN:-20000}
port_max=${LT_PORT_MAX:-32000}
lock_wait=${CH_LOCK_WAIT_MS:-500}
lease=${CH_LEASE_MS:-1000}
redis_timeout=${CH_REDIS_TIMEOUT_MS:-500}
threads=${CH_THREADS:-4}
token=${CH_ADMIN_TOKEN:-chaos-admin-token}
read -r gap_min gap_max <<<"${CH_NEMESIS_GAP_MS:-1500 5000}"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
res=${out:-$lt/results/chaos-$stamp}
mkdir -p "$res/logs"
res=$(cd "$res" && pwd)
run_dir=$res/run ctl=$res/ctl
rm -rf "$run_dir" "$ctl"
mkdir -p "$run_dir" "$ctl"
: >"$res/nemesis.jsonl"
lib_name=chaos
# shellcheck source=loadtest/lib.sh
. "$lt/lib.sh"

py_pid=""
# shellcheck disable=SC2317  # called by lib.sh's exit trap
cleanup_hook() { : >"$ctl/done" 2>/dev/null || true; }
install_cleanup

[ "${LT_SKIP_DEPS:-0}" = 1 ] || "$root/scripts/deps.sh"
for tool in redis-server redis-cli curl "$py"; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/deps.sh installs it)"
done
[ "${LT_SKIP_BUILD:-0}" = 1 ] || build_targets inventoryd
[ -x "$bin" ] || die "no inventoryd binary at $bin"

log "seed $seed ($mode: $duration s of traffic, checkpoint every $every s); replay: loadtest/chaos.sh --$mode --seed $seed"
log "results in $res"

# Redis with its AOF fsynced before every reply: a kill -9 of Redis then loses no acknowledged
# write, so a missing acknowledged order is the service's fault, not the test's.
redis_args=(--appendonly yes --appendfsync always)
start_redis
pick_instance_ports
inst_flags=(--admin-token "$token" --lock-lease-ms "$lease" --redis-timeout-ms "$redis_timeout")
start_servers inventoryd "$instances" "$threads" "${inst_flags[@]}"
log "redis-server on $redis_port (AOF always), inventoryd on ${inst_ports[*]} (lease $lease ms, lock wait $lock_wait ms)"

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
  launch_instance "$i" "$threads" "${inst_flags[@]}"
  inst_pids[i]=$pid
  wait_ready "$pid" 100 curl -fsS --max-time 1 "http://127.0.0.1:${inst_ports[i]}/readyz" \
    || die "inventoryd $i did not come back on port ${inst_ports[i]} (see $res/logs/inventoryd$i.log)"
}
# One fault, chosen and timed by the seed; when it returns, everything is running again.
fault() {
  local i kind ms
  rnd 0 99; kind=$r
  rnd 0 $((instances - 1)); i=$r
  if [ "$kind" -lt 30 ]; then
    rnd 200 2000; ms=$r
    event kill9 "inventoryd$i" "down ${ms} ms"
    kill -KILL "${inst_pids[i]}" 2>/dev/null || true
    wait "${inst_pids[i]}" 2>/dev/null || true
    sleep_ms "$ms"
    restart_instance "$i"
    event back "inventoryd$i"
  elif [ "$kind" -lt 75 ]; then
    # Past the lease, and often past an Idempotency-Key claim's age limit too (lock wait +
    # lease + 2 × Redis timeout), after which another request may take the claim over.
    rnd $((lease * 2)) $((lease * 5)); ms=$r
    event sigstop "inventoryd$i" "stopped ${ms} ms (lease $lease ms)"
    kill -STOP "${inst_pids[i]}"
    sleep_ms "$ms"
    kill -CONT "${inst_pids[i]}"
    event back "inventoryd$i"
  else
    rnd 200 1500; ms=$r
    event redis-kill9 redis "down ${ms} ms + AOF load"
    kill -KILL "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
    sleep_ms "$ms"
    launch_redis || die "redis-server did not restart (see $res/logs/redis.log)"
    event back redis
  fi
}
# reap_crashed: an instance or redis-server that exited although no fault killed it is a
# finding (chaos.py reports the "crash" events with their exit status); it is restarted so that
# the run goes on.
reap_crashed() {
  local i st
  for ((i = 0; i < instances; i++)); do
    kill -0 "${inst_pids[i]}" 2>/dev/null && continue
    st=0
    wait "${inst_pids[i]}" 2>/dev/null || st=$?
    event crash "inventoryd$i" "exit status $st$([ "$st" -gt 128 ] && echo " (SIG$(kill -l $((st - 128))))")"
    log "inventoryd $i exited by itself (status $st); restarting it"
    restart_instance "$i"
  done
  if ! kill -0 "$redis_pid" 2>/dev/null; then
    st=0
    wait "$redis_pid" 2>/dev/null || st=$?
    event crash redis "exit status $st"
    log "redis-server exited by itself (status $st); restarting it"
    launch_redis || die "redis-server did not restart (see $res/logs/redis.log)"
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

# shellcheck disable=SC2086
"$py" "$lt/chaos.py" --seed "$seed" --redis-port "$redis_port" \
  --ports "$(IFS=,; echo "${inst_ports[*]}")" --token "$token" --out "$res" --ctl "$ctl" \
  --verify "$lt/verify.sh" --duration "$duration" --checkpoint-every "$every" \
  --clients "${CH_CLIENTS:-16}" --skus "${CH_SKUS:-4}" \
  --client-timeout "${CH_CLIENT_TIMEOUT_S:-2}" --think-ms "$think" --storms "${CH_STORMS:-1}" &
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
  if [ "${CH_NEMESIS:-1}" != 0 ] && [ "$(now_ms)" -ge "$next" ]; then
    fault
    rnd "$gap_min" "$gap_max"
    next=$(($(now_ms) + r))
  fi
  sleep 0.1
done
rc=0
wait "$py_pid" || rc=$?
extra_pids=()
case "$rc" in
  0) log "PASS: every check passed (seed $seed); $res/SUMMARY.md" ;;
  1) log "FAIL: violations found (seed $seed); $res/SUMMARY.md" ;;
  *) log "chaos.py exited with $rc (seed $seed); see $res/run.log" ;;
esac
exit "$rc"
