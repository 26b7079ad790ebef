#!/usr/bin/env bash
# Runs every libFuzzer target of service/fuzz for SECONDS each (default 30), JOBS (2) at a
# time, under AddressSanitizer + UndefinedBehaviorSanitizer, each on a fresh copy of its seed
# corpus (service/fuzz/corpus/<target>/, never modified). Fails on the first crash, leak,
# timeout or out-of-memory and names the input that caused it.
#
#   scripts/fuzz.sh [SECONDS]      configure + build build-fuzz (clang, -DFUZZ=ON) and fuzz
#   scripts/fuzz.sh --probe        exit 0 when clang can build a libFuzzer binary, else 1
#   scripts/fuzz.sh --build        configure + build build-fuzz only (scripts/test.sh builds it
#                                  early, in the background)
#
# Env: FUZZ_BUILD_DIR (build-fuzz), FUZZ_OUT_DIR (<build dir>/fuzz-out: work corpora, logs and
#      crash artifacts), FUZZ_TARGETS (default "fuzz_validate fuzz_config fuzz_router fuzz_identity"),
#      CC (clang), JOBS (2: the build's jobs, and targets fuzzing at once), FUZZ_ARGS (extra
#      libFuzzer flags, e.g. "-dict=...").
# A crash is reproduced with: <build dir>/bin/<target> <artifact>
set -euo pipefail
cd "$(dirname "$0")/.."

cc=${CC:-clang}
# Only clang can fuzz; a CC=gcc inherited from the environment would just fail the probe.
case "$(basename "$cc")" in clang*) ;; *) cc=clang ;; esac

probe() {
  command -v "$cc" >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    >"$dir/probe.c"
  local rc=0
  "$cc" -fsanitize=fuzzer,address,undefined "$dir/probe.c" -o "$dir/probe" >/dev/null 2>&1 &&
    "$dir/probe" -runs=1 >/dev/null 2>&1 || rc=1
  rm -rf "$dir"
  return $rc
}

if [ "${1:-}" = "--probe" ]; then
  probe
  exit $?
fi

build_only=0
if [ "${1:-}" = "--build" ]; then
  build_only=1
  shift
fi
seconds=${1:-30}
case "$seconds" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] | --build | --probe" >&2; exit 2 ;; esac
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
out_dir=${FUZZ_OUT_DIR:-$build_dir/fuzz-out}
targets=${FUZZ_TARGETS:-fuzz_validate fuzz_config fuzz_router fuzz_identity}
jobs=${JOBS:-2}
case "$jobs" in '' | *[!0-9]* | 0) echo "scripts/fuzz.sh: JOBS must be a number of 1 or more" >&2; exit 2 ;; esac

if ! probe; then
  echo "scripts/fuzz.sh: $cc cannot build libFuzzer binaries (needs clang and libclang-rt-*-dev)" >&2
  exit 1
fi

echo "== configure $build_dir (clang, FUZZ=ON, address,undefined)"
# -Werror stays with the gcc builds (CI=true turns it on): clang's warning set differs (it does
# not take /* fall through */ comments, for one), and a warning must not stop the fuzzing.
CI=false cmake -S . -B "$build_dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFUZZ=ON -DSANITIZE=address,undefined -DWERROR=OFF >/dev/null
echo "== build $targets"
# shellcheck disable=SC2086
cmake --build "$build_dir" -j "$jobs" --target $targets >/dev/null
[ "$build_only" = 0 ] || exit 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$out_dir/artifacts"

# fuzz_start T: a fresh work corpus for target T, and T fuzzing it in the background (pid in
# fuzz_pid). Its output goes to $out_dir/T.log.
fuzz_start() {
  local t=$1 seeds=service/fuzz/corpus/$1 work=$out_dir/$1-corpus max_len=4096
  rm -rf "$work"
  mkdir -p "$work"
  cp "$seeds"/* "$work"/
  [ "$t" = fuzz_validate ] && max_len=20000 # reach the 16 KiB body limit and past it
  [ "$t" = fuzz_config ] && max_len=8192    # config/inventoryd.json is a seed
  [ "$t" = fuzz_identity ] && max_len=9000  # past IDENTITY_TOKEN_MAX (8192)
  echo "== $t: ${seconds}s on a copy of $seeds ($(ls "$seeds" | wc -l) seeds)"
  # shellcheck disable=SC2086
  "$build_dir/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=$max_len -print_final_stats=1 -artifact_prefix="$out_dir/artifacts/$t-" \
    ${FUZZ_ARGS:-} "$work" >"$out_dir/$t.log" 2>&1 &
  fuzz_pid=$!
}

# fuzz_report T RC: T's last status line (#runs cov ft corp exec/s) and final stats; on a
# non-zero RC what went wrong, and status=1.
fuzz_report() {
  local t=$1 rc=$2 log=$out_dir/$1.log
  echo "-- $t:"
  grep -E '^#[0-9]+' "$log" | tail -1 || true
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" | tr '\n' ' '
  echo
  if [ "$rc" -ne 0 ]; then
    echo "scripts/fuzz.sh: $t FAILED (exit $rc); log $log" >&2
    grep -E 'ERROR|SUMMARY|check failed|Test unit written' "$log" >&2 || tail -30 "$log" >&2
    status=1
  fi
}

# JOBS targets at a time (libFuzzer runs one thread: each target has a core for its SECONDS, as
# when they ran one after the other, in half the time on 2 cores). After a failure no further
# batch starts.
status=0
# shellcheck disable=SC2206
todo=($targets)
while [ ${#todo[@]} -gt 0 ] && [ $status -eq 0 ]; do
  batch=("${todo[@]:0:$jobs}")
  todo=("${todo[@]:$jobs}")
  pids=()
  for t in "${batch[@]}"; do
    fuzz_start "$t"
    pids+=("$fuzz_pid")
  done
  for i in "${!batch[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    fuzz_report "${batch[$i]}" "$rc"
  done
done

if [ $status -ne 0 ]; then
  exit $status
fi
echo "scripts/fuzz.sh: $targets: no crash in ${seconds}s each"
