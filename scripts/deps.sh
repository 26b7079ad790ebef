#!/usr/bin/env bash
# Installs the Debian packages inventoryd needs to build, test and run, but only those that are
# missing: on a machine that has them all it changes nothing and makes no network call.
# Works as root or through sudo. Extra packages: DEPS_EXTRA="pkg1 pkg2" scripts/deps.sh
# --docker adds what scripts/docker-test.sh needs: the Docker engine (docker.io), debootstrap
# (the base images are made, not pulled) and docker-compose.
# --e2e adds what the e2e tests need (ctest -L e2e: the OpenAPI contract, the dashboard in a
# browser, Prometheus): chromium, prometheus (promtool), jq, man-db, Node.js and npm (npm only when
# no npm is on PATH: a Node.js from elsewhere brings its own), then `npm ci` of the pinned
# packages in service/tests/e2e (package-lock.json; only when node_modules is missing or older
# than the lock file). playwright-core drives Debian's /usr/bin/chromium and downloads no browser.
# --bench adds perf (linux-perf): loadtest/loopcore.sh --syscalls and loadtest/run.sh's profiles.
# --peers adds what the SPEC §9 peers need (loadtest/peers/, measured by loadtest/peers.sh, kept
# working by the script_peers test): golang-go and redigo (the Go peer, built offline in GOPATH
# mode), libnginx-mod-http-lua and lua-cjson (the OpenResty peers on Debian's nginx), Node.js and
# npm (as for --e2e), then `npm ci` of loadtest/peers/node (fastify, ioredis, redlock; pinned in its
# package-lock.json; only when node_modules is missing or older than the lock file).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libmicrohttpd-dev libhiredis-dev libjansson-dev libcmocka-dev libevent-dev
  libssl-dev  # OpenSSL's libcrypto: SHA-256 of the admin token's audit fingerprint
  libjwt-dev  # libjwt 1.10: verifies the orders' bearer JWTs (--jwt-key-file, identity.c)
  redis-server redis-tools
  wrk nginx curl gnuplot-nox
  python3  # loadtest/chaos.py: the randomized history test's clients and checker (stdlib only)
  # scripts/fuzz.sh: clang with libFuzzer. libclang-rt-14-dev holds libFuzzer and the
  # sanitizer runtimes; clang only recommends it, and recommends are not installed here.
  clang libclang-rt-14-dev
  clang-format  # scripts/format.sh: the one formatter (.clang-format); test.sh runs its --check
  lua5.1  # luac5.1 -p: the lua_syntax test parses every Lua script (scripts/check_lua.sh)
  gdb  # the test fixture prints the threads of an inventoryd that will not exit before killing it
  libmariadb-dev  # inventory-sink writes the order log into MySQL/MariaDB (libmariadb)
  mariadb-server  # mariadbd + mariadb-install-db (+ the mariadb client): the tests' throwaway database (it_sink, lockcore it_mysql, it_lock_mysql, loadtest/faults.sh --lock-mysql, loadtest/locks.sh)
  libzookeeper-mt-dev  # lockcore's ZooKeeper lock (zk_async.c, libzookeeper-mt's async API)
  zookeeper  # the server (Java) the ZooKeeper lock's tests start (lockcore/tests/support/zk_fixture.c) and loadtest/locks.sh starts
)
# shellcheck disable=SC2206
[ -n "${DEPS_EXTRA:-}" ] && packages+=(${DEPS_EXTRA})
e2e=0 peers=0
for arg in "$@"; do
  case "$arg" in
    --docker) packages+=(docker.io debootstrap docker-compose) ;;
    --bench) packages+=(linux-perf) ;;
    --e2e)
      e2e=1
      packages+=(chromium prometheus jq man-db)
      command -v node >/dev/null 2>&1 || packages+=(nodejs)
      command -v npm >/dev/null 2>&1 || packages+=(npm)
      ;;
    --peers)
      peers=1
      packages+=(golang-go golang-github-gomodule-redigo-dev libnginx-mod-http-lua lua-cjson)
      command -v node >/dev/null 2>&1 || packages+=(nodejs)
      command -v npm >/dev/null 2>&1 || packages+=(npm)
      ;;
    *) echo "deps.sh: unknown option $arg (known: --docker, --e2e, --bench, --peers)" >&2; exit 2 ;;
  esac
done

# npm_ci DIR: npm ci in DIR (of the repository), when its node_modules is missing or older than
# the lock file.
npm_ci() {
  local dir
  dir=$(cd "$(dirname "$0")/.." && pwd)/$1
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "deps.sh: npm ci in $dir" >&2
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund >/dev/null)
  fi
}
# The npm packages of the groups asked for.
npm_groups() {
  [ "$e2e" = 0 ] || npm_ci service/tests/e2e
  [ "$peers" = 0 ] || npm_ci loadtest/peers/node
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  npm_groups
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo_cmd=()
elif command -v sudo >/dev/null 2>&1; then
  sudo_cmd=(sudo)
else
  echo "deps.sh: missing packages (${missing[*]}) and neither root nor sudo available" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_groups
exit 0
