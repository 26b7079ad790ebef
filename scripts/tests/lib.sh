#!/usr/bin/env bash
# Shared by the script tests (scripts/tests/*_test.sh, run by ctest and by scripts/test.sh):
# free loopback ports, waiting, a temp dir and processes that are cleaned up on every exit
# (trap), and pass/fail bookkeeping ending in the "N passed, N failed" line.
# Source it after `set -euo pipefail`. Env: INVENTORY_BUILD_DIR (the build with bin/inventoryd;
# default <repo>/build).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${INVENTORY_BUILD_DIR:-$repo/build}
bin=${INVENTORY_BUILD_BIN:-$build_dir/bin}/inventoryd
t_dir=$(mktemp -d "${TMPDIR:-/tmp}/inventoryd-$(basename "$0" .sh).XXXXXX")
t_pids=()
t_passed=0
t_failed=0
t_used_ports=" "

t_cleanup() {
  local p
  for p in "${t_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${t_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  if [ "${T_KEEP:-0}" = 1 ]; then echo "kept $t_dir" >&2; else rm -rf "$t_dir"; fi
}
trap t_cleanup EXIT
trap 'exit 130' INT TERM

# t_port: a free port on 127.0.0.1 in $port.
t_port() {
  local i
  for ((i = 0; i < 200; i++)); do
    port=$((10000 + (RANDOM * 32768 + RANDOM) % 22000)) # below the ephemeral range (32768-)
    [[ $t_used_ports == *" $port "* ]] && continue
    if ! (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      t_used_ports+="$port "
      return 0
    fi
  done
  echo "no free port" >&2
  return 1
}

# t_wait TENTHS CMD...: runs CMD every 0.1 s until it succeeds; 1 after TENTHS tries.
t_wait() {
  local n=$1 i; shift
  for ((i = 0; i < n; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# t_redis PORT [redis-server args...]: a throwaway redis-server on 127.0.0.1:PORT.
t_redis() {
  local p=$1; shift
  mkdir -p "$t_dir/redis-$p"
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$t_dir/redis-$p" \
    --daemonize no "$@" >"$t_dir/redis-$p.log" 2>&1 &
  t_pids+=($!)
  t_wait 100 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p" || {
    echo "redis-server on $p did not start:" >&2; cat "$t_dir/redis-$p.log" >&2; return 1; }
}

# t_check NAME CMD...: one check: runs CMD, counts and reports it.
t_check() {
  local name=$1; shift
  if "$@"; then
    t_passed=$((t_passed + 1)); echo "ok   - $name"
  else
    t_failed=$((t_failed + 1)); echo "FAIL - $name" >&2
  fi
}

# t_done: the closing line; exit 1 when a check failed.
t_done() {
  echo "$(basename "$0" .sh): $t_passed passed, $t_failed failed"
  [ "$t_failed" -eq 0 ]
}

# t_inventoryd LOG ARGS...: starts inventoryd on a free 127.0.0.1 port with ARGS, its stderr in
# $t_dir/LOG; waits until /healthz answers. Sets $port (and t_pids gets the pid).
t_inventoryd() {
  local log=$1; shift
  t_port
  "$bin" --port "$port" --bind 127.0.0.1 "$@" 2>"$t_dir/$log" &
  t_pids+=($!)
  t_wait 100 curl -fsS "http://127.0.0.1:$port/healthz" || {
    echo "inventoryd ($*) did not start:" >&2; cat "$t_dir/$log" >&2; return 1; }
}

# t_need TOOL... : every TOOL is on PATH (scripts/deps.sh installs them). Otherwise the test is
# skipped with exit 77 (ctest's SKIP_RETURN_CODE), saying so; under CI=true it fails instead.
t_need() {
  local tool missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${CI:-}" = true ]; then
    echo "$(basename "$0" .sh): ${missing[*]} not installed (scripts/deps.sh installs it); CI=true: failing" >&2
    exit 1
  fi
  echo "$(basename "$0" .sh): SKIPPED: ${missing[*]} not installed (scripts/deps.sh installs it)"
  exit 77
}

# t_need_npm: the npm packages of service/tests/e2e (scripts/deps.sh runs npm ci there), as t_need.
e2e_dir=$repo/service/tests/e2e
t_need_npm() {
  t_need node
  [ -d "$e2e_dir/node_modules/ajv" ] && [ -d "$e2e_dir/node_modules/playwright-core" ] && return 0
  if [ "${CI:-}" = true ]; then
    echo "$(basename "$0" .sh): $e2e_dir/node_modules missing (scripts/deps.sh runs npm ci); CI=true: failing" >&2
    exit 1
  fi
  echo "$(basename "$0" .sh): SKIPPED: npm packages not installed (scripts/deps.sh runs npm ci in service/tests/e2e)"
  exit 77
}

# t_run NAME LOG CMD...: one check that runs CMD with its output in $t_dir/LOG, shown on stdout
# when it passes and on stderr when it fails.
t_run() {
  local name=$1 log=$t_dir/$2; shift 2
  if "$@" >"$log" 2>&1; then
    cat "$log"; t_check "$name" true
  else
    cat "$log" >&2; t_check "$name" false
  fi
}
