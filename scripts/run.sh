#!/usr/bin/env bash
# One command to a working service: installs missing packages, builds, starts a private
# redis-server unless a Redis is given (--redis URL or INVENTORY_REDIS_URL), starts inventoryd,
# preheats a demo SKU and prints curl commands that work as printed. Ctrl-C stops everything.
#
# Env: INVENTORY_PORT (8080), REDIS_PORT (6399, for the private Redis), BUILD_DIR (build),
#      DEMO_SKU (demo-sku), DEMO_STOCK (1000), DEMO_SEGMENTS (16), RUN_DIR (a temp dir).
# Any other arguments are passed to inventoryd (e.g. --threads 8 --strategy atomic).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
port=${INVENTORY_PORT:-8080}
redis_port=${REDIS_PORT:-6399}
sku=${DEMO_SKU:-demo-sku}
stock=${DEMO_STOCK:-1000}
segments=${DEMO_SEGMENTS:-16}
run_dir=${RUN_DIR:-$(mktemp -d /tmp/inventoryd-run.XXXXXX)}

redis_url=${INVENTORY_REDIS_URL:-}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --redis) redis_url=$2; shift 2 ;;
    --redis=*) redis_url=${1#--redis=}; shift ;;
    --port) port=$2; shift 2 ;;
    --port=*) port=${1#--port=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

scripts/deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j 2 >/dev/null

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if [ -z "$redis_url" ]; then
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$run_dir" --save "" \
    --appendonly yes --appendfsync everysec --daemonize no >"$run_dir/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis_url="redis://127.0.0.1:$redis_port"
  echo "run.sh: private redis-server on port $redis_port (data in $run_dir)"
fi

"$build_dir/bin/inventoryd" --port "$port" --redis "$redis_url" ${args[@]+"${args[@]}"} \
  2> >(tee -a "$run_dir/inventoryd.log" >&2) &
pids+=($!)
for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || { echo "run.sh: inventoryd is not ready" >&2; exit 1; }

auth=()
[ -n "${INVENTORY_ADMIN_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $INVENTORY_ADMIN_TOKEN")
curl -fsS -X PUT ${auth[@]+"${auth[@]}"} -H 'Content-Type: application/json' \
  -d "{\"stock\": $stock, \"segments\": $segments}" "http://127.0.0.1:$port/api/v1/skus/$sku" >/dev/null
cat <<MSG

inventoryd is up on port $port (Redis: $redis_url). Demo SKU "$sku": $stock units in $segments segments.
Try:
  curl -s http://127.0.0.1:$port/api/v1/skus/$sku
  curl -s -X POST -H 'Content-Type: application/json' -d '{"sku":"$sku","quantity":2,"user_id":"alice"}' http://127.0.0.1:$port/api/v1/orders
  curl -s -X POST -H 'Content-Type: application/json' -H 'Idempotency-Key: order-42' -d '{"sku":"$sku"}' http://127.0.0.1:$port/api/v1/orders
  curl -s -X PUT -H 'Content-Type: application/json' -d '{"stock":500,"segments":8}' http://127.0.0.1:$port/api/v1/skus/other-sku
  curl -s -X POST -H 'Content-Type: application/json' -d '{"quantity":100}' http://127.0.0.1:$port/api/v1/skus/$sku/restock
  curl -s http://127.0.0.1:$port/readyz
  curl -s http://127.0.0.1:$port/metrics | grep inventory_orders
(admin calls are accepted from loopback while no --admin-token is set)
Press Ctrl-C to stop.
MSG
wait "${pids[-1]}"
