#!/usr/bin/env bash
# Installs the Debian packages inventoryd needs to build, test and run, but only those that are
# missing: on a machine that has them all it changes nothing and makes no network call.
# Works as root or through sudo. Extra packages: DEPS_EXTRA="pkg1 pkg2" scripts/deps.sh
# --docker adds what scripts/docker-test.sh needs: the Docker engine (docker.io), debootstrap
# (the base images are made, not pulled) and docker-compose.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libmicrohttpd-dev libhiredis-dev libjansson-dev libcmocka-dev libevent-dev
  redis-server redis-tools
  wrk nginx curl gnuplot-nox
  python3  # loadtest/chaos.py: the randomized history test's clients and checker (stdlib only)
  # scripts/fuzz.sh: clang with libFuzzer. libclang-rt-14-dev holds libFuzzer and the
  # sanitizer runtimes; clang only recommends it, and recommends are not installed here.
  clang libclang-rt-14-dev
)
# shellcheck disable=SC2206
[ -n "${DEPS_EXTRA:-}" ] && packages+=(${DEPS_EXTRA})
for arg in "$@"; do
  case "$arg" in
    --docker) packages+=(docker.io debootstrap docker-compose) ;;
    *) echo "deps.sh: unknown option $arg (known: --docker)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
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
