#!/usr/bin/env bash
# Installs what is missing, checks the formatting (scripts/format.sh --check), builds, and runs
# every test with ctest: once in a normal build, once
# more under AddressSanitizer + UndefinedBehaviorSanitizer and once more under ThreadSanitizer
# (the inventoryd processes the service tests start are the TSan build too, and a report in one
# fails its test through its exit status). Each pass runs two tests at a time (ctest -j
# CTEST_JOBS): most of a test's time is waiting (leases, failovers, delays), not CPU; the
# heaviest ones (Redis Cluster, MariaDB, nginx, Prometheus, chromium) never run two at once
# (cmake/tests.cmake, TEST_SCHEDULE) and the longest start first. Exits non-zero on any failure.
# Time on 2 cores (each line says its minute: "== [+MMmSSs]"): 2026-11-29, before the sanitizer
# builds went to the background and the twins out of the sanitizer passes, 33 min 36 s: the
# normal build 64 s, its ctest pass 377 s, the ASan build 112 s and pass 349 s, the TSan build
# 68 s and pass 332 s, the docker test 176 s with the fuzz targets beside it, loadtest --quick
# 89 s, chaos.sh --short 92 s, --cluster --short 48 s, cluster.sh 54 s, faults.sh 125 s,
# sinkfaults.sh 85 s. With the sanitizer builds in the background and no twins under the
# sanitizers (023e3a1): 30 min 42 s (the normal pass 406 s beside the builds, ASan 323 s, TSan
# 336 s). Since then the fuzz targets' build is in the background too, the builds one at a time,
# and loadtest --quick's windows are 2 s (da48baf): 28 min 18 s (the normal pass 387 s, ASan 309
# s, TSan 321 s, the docker test 101 s with the fuzz targets beside it, the loadtests 8 min).
# Each ctest pass is ~6 min (the heavy tests run one after the other, a
# floor under its length: keep them few and short); the docker test takes 5-6 min the first time
# on a machine (debootstrap).
# Then each libFuzzer target for FUZZ_SECONDS (30) with scripts/fuzz.sh, when clang can build
# libFuzzer binaries (deps.sh installs it; otherwise the step is skipped with a message), in the
# background beside the docker test (below), its output printed after it.
# The e2e tests (ctest -L e2e: docs/openapi.yaml against live instances, the dashboard in Debian's
# chromium, a real Prometheus; about 25 s together) run in the normal build only; their packages
# come from `scripts/deps.sh --e2e` (they skip, saying so, where those cannot be installed; under
# CI=true they fail instead).
# Env: BUILD_DIR (build), ASAN_BUILD_DIR (build-asan), SKIP_ASAN=1 to skip the second pass,
#      TSAN_BUILD_DIR (build-tsan), SKIP_TSAN=1 to skip the third pass, TSAN_OPTIONS
#      (halt_on_error=1:second_deadlock_stack=1), JOBS (2: the builds, the fuzz targets at once),
#      CTEST_JOBS (2: tests at once in each ctest pass; 1 for a serial run), CTEST_ARGS (extra
#      ctest arguments, e.g. "-L unit"), SKIP_LOADTEST=1, SKIP_FUZZ=1, FUZZ_SECONDS (30), SKIP_FAULTS=1,
#      SKIP_DOCKER=1, SKIP_CHAOS=1 (both chaos runs), SKIP_CHAOS_CLUSTER=1 (its cluster run only),
#      SKIP_CLUSTER=1, CLUSTER_WINDOW_S (12), SKIP_SINKFAULTS=1.
# Then scripts/docker-test.sh: the image (docker build), a container of it and docker-compose.yml in
# a real Docker engine, started here if needed (about 4-6 minutes the first time on 2 cores, the
# debootstrap'd base image then cached; it skips with one line where dockerd cannot start, but
# not under CI=true). The script tests (scripts/tests/: run.sh, the nginx config, cmake
# --install, the SPEC §9 peers of loadtest/peers/ with the packages of `scripts/deps.sh --peers`)
# are ctest tests, labelled "scripts", run in the normal build only (like e2e); the peers'
# benchmark, loadtest/peers.sh, is not run here.
# Last, loadtest/run.sh --quick (the benchmark's short form, invariants checked after each run)
# loadtest/chaos.sh --short (the randomized concurrent-history test, with the order log into a
# private MariaDB through inventory-sink, about 80 s; --long is the
# 10-minute form, not run here), loadtest/chaos.sh --cluster --short (the same history against a
# local Redis Cluster with --redis-replica-acks 1: kill -9 of masters, their replicas promoted, the
# dead nodes back as replicas, and instance faults; about 50 s with the cluster's start; every 201
# order must be in Redis afterwards), loadtest/cluster.sh --failover --reshard (a local Redis Cluster under
# load: kill -9 of a master with --redis-replica-acks 1 and 0, and redis-cli --cluster reshard; about
# 80 s; invariants and every 201 against Redis checked) and loadtest/faults.sh (the fault tests: kill -9,
# SIGSTOP, Redis restarts, Redis absent, latency, lease < hold; its --soak form is the long one, not run
# here), then again with --lock-redis (Redlock on 5 lock nodes: kill -9, SIGSTOP past the lease,
# kill -9 of lock nodes; about 35 s), and loadtest/sinkfaults.sh --short (the order log under faults,
# SPEC §12: a sale through nginx and 3 instances with --order-log into a real MariaDB while the sink is
# killed -9 mid-batch, MariaDB is killed and is slow, an instance is killed mid-order, a Redis master
# fails over with acks 1, two sinks run; inventory-sink reconcile and the §8 checks after each; about
# 1.5 min; its long form, without --short, about 9 min, is not run here).
set -euo pipefail
cd "$(dirname "$0")/.."
# step TEXT: a section's line, "== [+MMmSSs] TEXT", the time since the start: where the minutes go.
step() { printf '== [+%02dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

build_dir=${BUILD_DIR:-build}
asan_dir=${ASAN_BUILD_DIR:-build-asan}
tsan_dir=${TSAN_BUILD_DIR:-build-tsan}
jobs=${JOBS:-2}
ctest_args=${CTEST_ARGS:-}
ctest_jobs=${CTEST_JOBS:-2}

if [ "${SKIP_DOCKER:-0}" != 1 ]; then
  scripts/deps.sh --docker || step "deps: the Docker packages could not be installed (the docker test will say)"
fi
scripts/deps.sh --e2e || step "deps: the e2e packages could not be installed (the e2e tests will say)"
scripts/deps.sh --peers || step "deps: the peers' packages could not be installed (the script_peers test will say)"
scripts/deps.sh
step "format check (scripts/format.sh --check: every C file as .clang-format says; fix with scripts/format.sh)"
scripts/format.sh --check

# configure DIR [CMAKE_ARGS...]
configure() {
  local dir=$1; shift
  step "configure $dir $*"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
}

# The sanitizer builds compile in the background at nice 19 while the normal pass's tests run
# (BG_BUILDS=0: each in the foreground before its pass): those tests mostly wait (leases,
# expiries, failovers), so the compilers take the idle CPU and the tests keep theirs (about 3
# min of the run). Each build's output goes to DIR/build.log, printed when it fails;
# bg_build_wait DIR waits for DIR's build (or builds it now) and fails the run if it failed.
bg_builds=()
bg_pids=()
# a pass that fails ends the run: its background builds with it
trap 'for p in "${bg_pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT
bg_build_wait() {
  local dir=$1 i rc
  for i in "${!bg_builds[@]}"; do
    [ "${bg_builds[$i]}" = "$dir" ] || continue
    step "build $dir (in the background since the normal build): waiting for it"
    rc=0
    wait "${bg_pids[$i]}" || rc=$?
    if [ "$rc" != 0 ]; then
      tail -n 60 "$dir/build.log"
      echo "scripts/test.sh: the build of $dir failed (exit $rc; $dir/build.log)" >&2
      exit "$rc"
    fi
    grep -E "warning:" "$dir/build.log" || true
    return 0
  done
  step "build $dir"
  cmake --build "$dir" -j "$jobs"
}

# run_tests DIR EXTRA_CTEST_ARGS
run_tests() {
  local dir=$1 extra=$2
  step "test $dir"
  # shellcheck disable=SC2086
  (cd "$dir" && ctest --output-on-failure --timeout 300 -j "$ctest_jobs" $extra $ctest_args)
}

configure "$build_dir"
step "build $build_dir"
cmake --build "$build_dir" -j "$jobs"
if [ "${SKIP_ASAN:-0}" != 1 ]; then
  configure "$asan_dir" -DSANITIZE=address,undefined
fi
if [ "${SKIP_TSAN:-0}" != 1 ]; then
  configure "$tsan_dir" -DSANITIZE=thread
fi
if [ "${BG_BUILDS:-1}" = 1 ]; then
  # bg_start NAME LOG CMD...: CMD in the background at nice 19, in its own process group (the
  # trap above ends it with its compilers), once the previous background build has ended: one at
  # a time, two compilers at most beside the tests (three builds at once slowed the normal pass).
  prev=""
  bg_start() {
    local name=$1 log=$2; shift 2
    setsid bash -c 'while [ -n "$0" ] && kill -0 "$0" 2>/dev/null; do sleep 1; done; shift; exec nice -n 19 "$@"' \
      "$prev" _ "$@" >"$log" 2>&1 &
    prev=$!
    bg_builds+=("$name")
    bg_pids+=("$prev")
  }
  [ "${SKIP_ASAN:-0}" = 1 ] || bg_start "$asan_dir" "$asan_dir/build.log" cmake --build "$asan_dir" -j "$jobs"
  [ "${SKIP_TSAN:-0}" = 1 ] || bg_start "$tsan_dir" "$tsan_dir/build.log" cmake --build "$tsan_dir" -j "$jobs"
  # the fuzz targets' build too (they run beside the docker test, which then has the CPU to
  # itself for its image's compile); a failure here shows again when scripts/fuzz.sh builds
  if [ "${SKIP_FUZZ:-0}" != 1 ] && scripts/fuzz.sh --probe; then
    mkdir -p "${FUZZ_BUILD_DIR:-build-fuzz}"
    bg_start fuzz "${FUZZ_BUILD_DIR:-build-fuzz}/build.log" scripts/fuzz.sh --build
  fi
fi
run_tests "$build_dir" ""
# The sanitizer passes leave out the e2e and the scripts tests: they test documents, tools and
# shell scripts (the peers of loadtest/peers/, no inventoryd at all; run.sh, the nginx config,
# verify.sh), once is enough; the inventoryd they start does nothing the it_* tests do not do
# under the sanitizers. They leave out the cluster twins too (label "twin",
# service/CMakeLists.txt add_cluster_twin: it_cart_cluster, it_groups_cluster, …): their order
# paths run under both sanitizers on one Redis, and the cluster's routing, WAITs, threads and
# failovers in it_cluster and lockcore_it_cluster; about 60 s of each pass's heavy serial floor.
if [ "${SKIP_ASAN:-0}" != 1 ]; then
  bg_build_wait "$asan_dir"
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    run_tests "$asan_dir" "-LE e2e|scripts|twin"
fi
if [ "${SKIP_TSAN:-0}" != 1 ]; then
  bg_build_wait "$tsan_dir"
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
    run_tests "$tsan_dir" "-LE e2e|scripts|twin"
fi
# The fuzz targets run beside the docker test, whose minutes are mostly waiting (apt's mirror,
# containers starting) and which asserts nothing on timing; the fuzzers' output is printed after
# the docker test's, and a crash fails the run as before.
fuzz_pid=""
fuzz_log=""
if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  for i in "${!bg_builds[@]}"; do # its background build, if any: done or failed, fuzz.sh builds
    [ "${bg_builds[$i]}" = fuzz ] && { wait "${bg_pids[$i]}" || true; }
  done
  if scripts/fuzz.sh --probe; then
    if [ "${SKIP_DOCKER:-0}" != 1 ]; then
      fuzz_log=$(mktemp /tmp/inventoryd-fuzz.XXXXXX)
      step "fuzz ${FUZZ_SECONDS:-30}s per target (beside the docker test; its output follows it)"
      scripts/fuzz.sh "${FUZZ_SECONDS:-30}" >"$fuzz_log" 2>&1 &
      fuzz_pid=$!
    else
      step "fuzz ${FUZZ_SECONDS:-30}s per target"
      scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
    fi
  else
    step "fuzz: skipped (clang cannot build libFuzzer binaries; scripts/deps.sh installs clang and libclang-rt-14-dev)"
  fi
fi
if [ "${SKIP_DOCKER:-0}" != 1 ]; then
  step "docker test"
  docker_rc=0
  scripts/docker-test.sh || docker_rc=$?
  if [ -n "$fuzz_pid" ]; then
    fuzz_rc=0
    wait "$fuzz_pid" || fuzz_rc=$?
    step "fuzz (ran beside the docker test): exit $fuzz_rc"
    cat "$fuzz_log"
    rm -f "$fuzz_log"
    [ "$fuzz_rc" = 0 ] || { echo "scripts/test.sh: the fuzz targets failed" >&2; exit "$fuzz_rc"; }
  fi
  [ "$docker_rc" = 0 ] || { echo "scripts/test.sh: the docker test failed" >&2; exit "$docker_rc"; }
fi
if [ "${SKIP_LOADTEST:-0}" != 1 ] && [ -x loadtest/run.sh ]; then
  step "loadtest --quick"
  # 2 s windows: a smoke run of the benchmark (invariants checked after each run, ratios
  # printed); docs/performance.md's numbers come from the full form
  LT_WINDOW_S=${LT_WINDOW_S:-2} loadtest/run.sh --quick
fi
if [ "${SKIP_CHAOS:-0}" != 1 ]; then
  step "loadtest/chaos.sh --short (randomized history test; seed printed, replay with --seed)"
  LT_SKIP_DEPS=1 loadtest/chaos.sh --short
  if [ "${SKIP_CHAOS_CLUSTER:-0}" != 1 ]; then
    step "loadtest/chaos.sh --cluster --short (the same on a Redis Cluster: master kill -9 and restart, acks 1)"
    LT_SKIP_DEPS=1 LT_SKIP_BUILD=1 loadtest/chaos.sh --cluster --short
  fi
fi
if [ "${SKIP_CLUSTER:-0}" != 1 ]; then
  step "loadtest/cluster.sh --failover --reshard (Redis Cluster: kill -9 of a master and a reshard under load)"
  LT_WINDOW_S=${CLUSTER_WINDOW_S:-12} loadtest/cluster.sh --failover --reshard
fi
if [ "${SKIP_FAULTS:-0}" != 1 ]; then
  step "loadtest/faults.sh"
  LT_SKIP_DEPS=1 loadtest/faults.sh
  step "loadtest/faults.sh --lock-redis (kill, pause and lock-node kills with Redlock)"
  LT_SKIP_DEPS=1 LT_SKIP_BUILD=1 loadtest/faults.sh --lock-redis
fi
if [ "${SKIP_SINKFAULTS:-0}" != 1 ]; then
  step "loadtest/sinkfaults.sh --short (the order log into MariaDB under faults; about 1.5 min)"
  LT_SKIP_DEPS=1 loadtest/sinkfaults.sh --short
fi
echo "scripts/test.sh: all passed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
