#!/usr/bin/env bash
# One command to a working service: installs missing packages, builds, starts a private
# redis-server unless a Redis is given, starts inventoryd, preheats a demo SKU and prints curl
# commands that work as printed. Ctrl-C stops everything.
#
# Options of run.sh itself (all others go to inventoryd, e.g. --threads 8 --strategy atomic):
#   --redis URL, --redis-url-file FILE   your Redis (also INVENTORY_REDIS_URL / _FILE); else a
#                                        private redis-server on REDIS_PORT
#   --cluster                            a private local Redis Cluster instead (scripts/cluster.sh:
#                                        3 masters + 1 replica each, on free ports or CLUSTER_PORTS),
#                                        stopped with run.sh; inventoryd gets redis-cluster://…
#   --port N                             HTTP port (also INVENTORY_PORT; default 8080)
#   --admin-token T, --admin-token-file FILE   the admin token (also INVENTORY_ADMIN_TOKEN /
#                                        _FILE); else one is generated for this run
#   --config FILE                        passed on; run.sh then adds no flag for a setting the
#                                        file sets (port, redis, redis_url_file, admin_token,
#                                        admin_token_file), and reads the port inventoryd really
#                                        listens on from its start-up log line
#   --with-db                            also the order log into a database (SPEC §12): a private
#                                        MariaDB (mariadb-install-db + mariadbd, its data in
#                                        RUN_DIR/mariadb, on DB_PORT or a free port), a database
#                                        `shop` and a user `sink` with the privileges
#                                        docs/deployment.md lists, inventoryd with --order-log and
#                                        one inventory-sink; prints how to query the orders table
# Secrets never reach a command line (ps) or the output: the Redis URL and the admin token go to
# inventoryd as files (--redis-url-file, --admin-token-file, mode 0600 in RUN_DIR), the printed
# admin curl lines send the token from a header file (curl -H @FILE), and the Redis URL is
# printed with its password masked. The secret files are removed when run.sh stops. With
# --with-db the sink gets its URLs in a config file and the printed `mariadb` line reads the
# database password from an option file (--defaults-extra-file), both 0600 in RUN_DIR.
#
# Env: INVENTORY_PORT (8080), REDIS_PORT (6399, for the private Redis), BUILD_DIR (build),
#      DEMO_SKU (demo-sku), DEMO_STOCK (1000), DEMO_SEGMENTS (16), RUN_DIR (a temp dir),
#      RUN_SKIP_BUILD=1 (use the binary already in BUILD_DIR: no deps.sh, no build);
#      with --with-db: DB_PORT (a free port from 13306 up), SINK_METRICS_PORT (a free port
#      from 9100 up).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
port=${INVENTORY_PORT:-8080}
port_given=${INVENTORY_PORT:+1}
redis_port=${REDIS_PORT:-6399}
sku=${DEMO_SKU:-demo-sku}
stock=${DEMO_STOCK:-1000}
segments=${DEMO_SEGMENTS:-16}
run_dir=${RUN_DIR:-$(mktemp -d /tmp/inventoryd-run.XXXXXX)}
mkdir -p "$run_dir"
chmod 700 "$run_dir"

redis_url=${INVENTORY_REDIS_URL:-}
redis_url_file=${INVENTORY_REDIS_URL_FILE:-}
token=${INVENTORY_ADMIN_TOKEN:-}
token_file=${INVENTORY_ADMIN_TOKEN_FILE:-}
token_from_env=${INVENTORY_ADMIN_TOKEN:+1}${INVENTORY_ADMIN_TOKEN_FILE:+1}
config=""
cluster=""
with_db=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --redis) redis_url=$2; redis_url_file=""; shift 2 ;;
    --redis=*) redis_url=${1#--redis=}; redis_url_file=""; shift ;;
    --redis-url-file) redis_url_file=$2; redis_url=""; shift 2 ;;
    --redis-url-file=*) redis_url_file=${1#--redis-url-file=}; redis_url=""; shift ;;
    --port) port=$2; port_given=1; shift 2 ;;
    --port=*) port=${1#--port=}; port_given=1; shift ;;
    --admin-token) token=$2; token_file=""; token_from_env=""; shift 2 ;;
    --admin-token=*) token=${1#--admin-token=}; token_file=""; token_from_env=""; shift ;;
    --admin-token-file) token_file=$2; token=""; token_from_env=""; shift 2 ;;
    --admin-token-file=*) token_file=${1#--admin-token-file=}; token=""; token_from_env=""; shift ;;
    --cluster) cluster=1; shift ;;
    --with-db) with_db=1; shift ;;
    --config) config=$2; args+=("$1" "$2"); shift 2 ;;
    --config=*) config=${1#--config=}; args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$config" ] || config=${INVENTORY_CONFIG:-}
[ -z "$config" ] || [ -r "$config" ] || { echo "run.sh: cannot read the config file $config" >&2; exit 2; }

# config_value KEY: the value of KEY in the config file (a string without escapes, or a number;
# "" when the key is absent or null). Enough for the keys below; inventoryd does the real parsing.
config_value() {
  [ -n "$config" ] || return 0
  tr '\n' ' ' <"$config" |
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\(\"[^\"\\\\]*\"\|[0-9][0-9]*\).*/\1/p" | tr -d '"'
}
# A secret file of this run: mode 0600, removed at exit.
secret_file() { (umask 077 && printf '%s\n' "$2" >"$run_dir/$1"); echo "$run_dir/$1"; }

if [ "${RUN_SKIP_BUILD:-0}" != 1 ]; then
  scripts/deps.sh
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build_dir" -j 2 >/dev/null
fi

pids=()
cluster_dir=""
cleanup() {
  # Newest first: the sink and inventoryd before the database and Redis they use.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -z "$cluster_dir" ] || CLUSTER_DIR=$cluster_dir scripts/cluster.sh stop || true
  rm -f "$run_dir/admin-token" "$run_dir/admin.header" "$run_dir/redis-url" \
    "$run_dir/sink.json" "$run_dir/db-client.cnf"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

flags=()
# Port: ours unless the config file sets it and the user did not.
if [ -n "$port_given" ] || [ -z "$(config_value port)" ]; then flags+=(--port "$port"); fi

# Redis: the user's (as a file), the config file's, a private cluster, or a private one.
if [ -n "$cluster" ] && [ -n "$redis_url$redis_url_file" ]; then
  echo "run.sh: --cluster starts its own cluster: give it or --redis, not both" >&2
  exit 2
fi
if [ -n "$cluster" ]; then
  cluster_dir=$run_dir/cluster
  CLUSTER_DIR=$cluster_dir scripts/cluster.sh start >"$run_dir/cluster.env" \
    || { echo "run.sh: the local Redis Cluster did not start" >&2; exit 1; }
  redis_url=$(sed -n 's/^CLUSTER_URL=//p' "$run_dir/cluster.env")
  flags+=(--redis-url-file "$(secret_file redis-url "$redis_url")")
  echo "run.sh: private Redis Cluster (3 masters, 3 replicas) at $redis_url (data in $cluster_dir)"
elif [ -n "$redis_url_file" ]; then
  flags+=(--redis-url-file "$redis_url_file")
  redis_url=$(head -n1 "$redis_url_file")
elif [ -n "$redis_url" ]; then
  flags+=(--redis-url-file "$(secret_file redis-url "$redis_url")")
elif [ -n "$(config_value redis)$(config_value redis_url_file)" ]; then
  redis_url="$(config_value redis)"
  [ -n "$redis_url" ] || redis_url="(from $(config_value redis_url_file))"
else
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$run_dir" --save "" \
    --appendonly yes --appendfsync everysec --daemonize no >"$run_dir/redis.log" 2>&1 &
  pids+=($!)
  # Ours answers (a server someone else runs on the port would answer PING too: ours then
  # exits, unable to bind, and its pid is not the one that answers).
  redis_pid=${pids[-1]}
  for _ in $(seq 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(redis-cli -p "$redis_port" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')" = "$redis_pid" ] || {
    echo "run.sh: the private redis-server did not start on port $redis_port (taken? set REDIS_PORT; log: $run_dir/redis.log)" >&2
    exit 1
  }
  redis_url="redis://127.0.0.1:$redis_port"
  flags+=(--redis-url-file "$(secret_file redis-url "$redis_url")")
  echo "run.sh: private redis-server on port $redis_port (data in $run_dir)"
fi

# free_port FROM: the first port from FROM up that nobody listens on, in $free.
free_port() {
  free=$1
  while (: <>"/dev/tcp/127.0.0.1/$free") 2>/dev/null; do free=$((free + 1)); done
}

# --with-db: a private MariaDB for the order log (the same set-up as the tests' fixture,
# lockcore/tests/support/mariadb_fixture.c), and inventoryd writes the log.
if [ -n "$with_db" ]; then
  for tool in mariadbd mariadb-install-db mariadb; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
      { echo "run.sh: --with-db needs $tool (scripts/deps.sh installs mariadb-server)" >&2; exit 1; }
  done
  mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  db_dir=$run_dir/mariadb
  rm -rf "$db_dir" && mkdir -p "$db_dir"
  as_root=()
  [ "$(id -u)" != 0 ] || as_root=(--user=root)
  mariadb-install-db --no-defaults --datadir="$db_dir/data" --auth-root-authentication-method=normal \
    --skip-test-db ${as_root[@]+"${as_root[@]}"} >"$db_dir/install.log" 2>&1 ||
    { echo "run.sh: mariadb-install-db failed (log: $db_dir/install.log)" >&2; exit 1; }
  if [ -n "${DB_PORT:-}" ]; then db_port=$DB_PORT; else free_port 13306; db_port=$free; fi
  "$mariadbd" --no-defaults --datadir="$db_dir/data" --bind-address=127.0.0.1 --port="$db_port" \
    --socket="$db_dir/sock" --log-error="$db_dir/error.log" --pid-file="$db_dir/mariadbd.pid" \
    --innodb-buffer-pool-size=32M --skip-name-resolve ${as_root[@]+"${as_root[@]}"} &
  pids+=($!)
  root_sql() { mariadb --no-defaults --socket="$db_dir/sock" -uroot "$@"; }
  for _ in $(seq 300); do
    root_sql -e 'SELECT 1' >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  root_sql -e 'SELECT 1' >/dev/null 2>&1 ||
    { echo "run.sh: mariadbd did not start (log: $db_dir/error.log)" >&2; exit 1; }
  db_password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # The user and privileges docs/deployment.md lists ("The database user"); the password goes
  # to mariadb on its standard input, never on a command line.
  root_sql <<SQL || { echo "run.sh: creating the database failed" >&2; exit 1; }
CREATE DATABASE shop;
CREATE USER 'sink'@'127.0.0.1' IDENTIFIED BY '$db_password';
GRANT SELECT, INSERT, UPDATE, CREATE ON shop.* TO 'sink'@'127.0.0.1';
SQL
  (umask 077 && printf '[client]\nhost=127.0.0.1\nport=%s\nuser=sink\npassword=%s\ndatabase=shop\n' \
    "$db_port" "$db_password" >"$run_dir/db-client.cnf")
  echo "run.sh: private MariaDB on 127.0.0.1:$db_port (database shop, user sink; data in $db_dir)"
  flags+=(--order-log)
fi

# The admin token: the user's, the config file's, or a new one. inventoryd gets it as a file
# (or from the environment or config file it was given in); curl gets it as a header file.
token_note=""
if [ -n "$token_file" ]; then
  flags+=(--admin-token-file "$token_file")
  token=$(head -n1 "$token_file")
elif [ -n "$token" ] && [ -z "$token_from_env" ]; then
  flags+=(--admin-token-file "$(secret_file admin-token "$token")")
elif [ -n "$token" ]; then
  : # INVENTORY_ADMIN_TOKEN: inventoryd reads the same variable
elif [ -n "$(config_value admin_token_file)" ]; then
  token=$(head -n1 "$(config_value admin_token_file)")
elif [ -n "$(config_value admin_token)" ]; then
  token=$(config_value admin_token)
else
  token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  flags+=(--admin-token-file "$(secret_file admin-token "$token")")
  token_note="a new admin token for this run is in $run_dir/admin-token"
fi
(umask 077 && printf 'Authorization: Bearer %s\n' "$token" >"$run_dir/admin.header")

# Starts inventoryd; a password in the URL never reaches the command line. The log exists before
# it starts, so the wait below never reads a file tee has not made yet.
: >>"$run_dir/inventoryd.log"
env -u INVENTORY_REDIS_URL -u INVENTORY_REDIS_URL_FILE \
  "$build_dir/bin/inventoryd" ${flags[@]+"${flags[@]}"} ${args[@]+"${args[@]}"} \
  2> >(tee -a "$run_dir/inventoryd.log" >&2) &
pids+=($!)
inventoryd_pid=$!
# The address and port it really listens on, from its start-up line ("listening on A port N").
listen=""
for _ in $(seq 100); do
  # (|| true: until tee has made the log, sed fails, and set -e with pipefail would end run.sh)
  listen=$(sed -n 's/.*listening on \([^ ]*\) port \([0-9]*\) .*/\1 \2/p' "$run_dir/inventoryd.log" 2>/dev/null | tail -1) || true
  [ -n "$listen" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || break
  sleep 0.1
done
[ -n "$listen" ] || { echo "run.sh: inventoryd did not start (log: $run_dir/inventoryd.log)" >&2; exit 1; }
port=${listen#* }
case "${listen% *}" in
  0.0.0.0 | ::) host=127.0.0.1 ;;
  *:*) host="[${listen% *}]" ;;
  *) host=${listen% *} ;;
esac
base=http://$host:$port
for _ in $(seq 50); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/readyz" >/dev/null || { echo "run.sh: inventoryd is not ready (log: $run_dir/inventoryd.log)" >&2; exit 1; }

# --with-db: one inventory-sink on the same Redis, its URLs in a config file (not in ps).
db_lines=""
if [ -n "$with_db" ]; then
  sink_redis=$redis_url
  case "$sink_redis" in
    "(from "*) sink_redis=$(head -n1 "$(config_value redis_url_file)") ;;
  esac
  if [ -n "${SINK_METRICS_PORT:-}" ]; then sink_port=$SINK_METRICS_PORT; else free_port 9100; sink_port=$free; fi
  json_str() { sed 's/\\/\\\\/g; s/"/\\"/g' <<<"$1"; }
  (umask 077 && printf '{"redis": "%s", "db": "%s", "metrics_port": %s, "consumer": "run-sh"}\n' \
    "$(json_str "$sink_redis")" "$(json_str "mysql://sink:$db_password@127.0.0.1:$db_port/shop")" \
    "$sink_port" >"$run_dir/sink.json")
  : >>"$run_dir/sink.log"
  env -u INVENTORY_SINK_REDIS_URL -u INVENTORY_SINK_DB_URL \
    "$build_dir/bin/inventory-sink" --config "$run_dir/sink.json" 2>>"$run_dir/sink.log" &
  pids+=($!)
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$sink_port/healthz" >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:$sink_port/healthz" >/dev/null 2>&1 ||
    { echo "run.sh: inventory-sink did not start (log: $run_dir/sink.log)" >&2; exit 1; }
  db_lines="
Orders reach MariaDB (127.0.0.1:$db_port, database shop) through inventory-sink (log: $run_dir/sink.log):
  mariadb --defaults-extra-file=$run_dir/db-client.cnf -e 'SELECT order_id, sku, user_id, quantity, status, updated_at FROM orders ORDER BY updated_at DESC LIMIT 10'
  curl -s http://127.0.0.1:$sink_port/metrics | grep -e events_written -e lag_seconds
(the database password is in $run_dir/db-client.cnf, removed when run.sh stops)"
fi

hdr=$run_dir/admin.header
curl -fsS -X PUT -H "@$hdr" -H 'Content-Type: application/json' \
  -d "{\"stock\": $stock, \"segments\": $segments}" "$base/api/v1/skus/$sku" >/dev/null \
  || { echo "run.sh: preheating $sku failed (is the admin token right?)" >&2; exit 1; }
# The URL as printed: its password masked.
shown_url=$(sed 's#^\(redis\(-cluster\)\?://[^:/@]*\):[^@/]*@#\1:***@#' <<<"$redis_url")
cat <<MSG

inventoryd is up at $base (Redis: $shown_url). Demo SKU "$sku": $stock units in $segments segments.
Try:
  curl -s $base/api/v1/skus/$sku
  curl -s -X POST -H 'Content-Type: application/json' -d '{"sku":"$sku","quantity":2,"user_id":"alice"}' $base/api/v1/orders
  curl -s -X POST -H 'Content-Type: application/json' -H 'Idempotency-Key: order-42' -d '{"sku":"$sku"}' $base/api/v1/orders
  curl -s -X PUT -H @$hdr -H 'Content-Type: application/json' -d '{"stock":500,"segments":8}' $base/api/v1/skus/other-sku
  curl -s -X POST -H @$hdr -H 'Content-Type: application/json' -d '{"quantity":100}' $base/api/v1/skus/$sku/restock
  curl -s $base/readyz
  curl -s $base/metrics | grep inventory_orders
(admin calls send the token from $hdr${token_note:+; $token_note})$db_lines
Press Ctrl-C to stop.
MSG
wait "$inventoryd_pid"
