#!/usr/bin/env bash
# The container deliverables in a real Docker engine (issue #10, items 6-8), host network only:
#   1. the base images debian:bookworm and debian:bookworm-slim, made without a registry
#      (scripts/docker-base.sh: debootstrap --variant=minbase, cached tarball, docker import);
#   2. `docker build --network host .`: the image builds, carries its version label, runs as a
#      numeric non-root UID, holds a stripped binary and no compiler or curl;
#   3. the container (bound to 127.0.0.1 on a free port, Redis on the host's loopback, the admin
#      token from a mounted file) becomes healthy through its own HEALTHCHECK, takes a PUT and an
#      order, refuses admin without the token, and exits 0 on `docker stop`;
#   4. docker-compose.yml (Redis with AOF, 3 instances with the order log, nginx, MariaDB and
#      inventory-sink) comes up on free ports, sells a SKU out through nginx exactly, every order
#      reaches MariaDB's orders table (`inventory-sink reconcile` in the sink's container: the
#      database equals Redis), and is torn down.
# Time (2 cores, a fresh engine): the base images ~50 s the first time (debootstrap), the image
# ~90 s; compose's three helper images (redis, nginx, mariadb: apt-get installs, mostly waiting on
# the mirror) are built by docker-compose in the background meanwhile, and compose does not build
# the inventoryd image a second time (docker-py's build context misses the layer cache of
# `docker build`, so it used to compile everything again): it runs the image of step 2, after
# checking that docker-compose.yml builds it from the same Dockerfile and context.
# dockerd is started when it is not running (and stopped afterwards); where it cannot start the
# test prints one line and exits 0, except under CI=true, where that is a failure. Images are
# kept for the next run (layer cache); containers, volumes and processes are removed on exit.
#
# Env: DOCKER (docker client; /usr/bin/docker, Debian's, when present), DOCKER_TEST_KEEP=1 (keep
#      the temp dir), INVENTORY_CACHE_DIR (see docker-base.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
t0=$(date +%s)

if [ -n "${DOCKER:-}" ]; then docker=$DOCKER
elif [ -x /usr/bin/docker ]; then docker=/usr/bin/docker
else docker=docker; fi
export DOCKER=$docker

cannot() {
  if [ "${CI:-}" = true ]; then
    echo "docker test: FAILED: $1 (CI=true: the Docker test must run)" >&2
    exit 1
  fi
  echo "docker test: skipped: $1"
  exit 0
}

if ! scripts/deps.sh --docker; then cannot "the Docker packages could not be installed"; fi

tmp=$(mktemp -d /tmp/inventoryd-docker-test.XXXXXX)
project=invtest$$
container=inventoryd-test-$$
started_dockerd=""
host_pids=()
helper_build="" # the background docker-compose build of compose's helper images, until waited
compose_up=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$compose_up" ]; then
    docker-compose -p "$project" down -v --remove-orphans >>"$tmp/compose.log" 2>&1
  fi
  "$docker" rm -f "$container" >/dev/null 2>&1
  for p in "${host_pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -n "$helper_build" ]; then
    kill "$helper_build" 2>/dev/null
    wait "$helper_build" 2>/dev/null
  fi
  if [ -n "$started_dockerd" ]; then
    kill "$started_dockerd" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ "$rc" != 0 ]; then
    echo "docker test: logs in $tmp" >&2
  elif [ "${DOCKER_TEST_KEEP:-0}" != 1 ]; then
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "docker test: FAIL: $*" >&2; exit 1; }
phase() { echo "== docker test: $* ($(($(date +%s) - t0)) s)"; }

# free_port: a free loopback port in $port (below the ephemeral range).
used=" "
free_port() {
  local i
  for ((i = 0; i < 200; i++)); do
    port=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
    [[ $used == *" $port "* ]] && continue
    if ! (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then used+="$port "; return 0; fi
  done
  fail "no free port"
}
# wait_for TENTHS CMD...
wait_for() {
  local n=$1 i; shift
  for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# --- the engine ------------------------------------------------------------------------------
if ! "$docker" info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || cannot "dockerd is not running and only root can start it"
  command -v dockerd >/dev/null || cannot "no dockerd (Debian package docker.io)"
  phase "starting dockerd"
  # No bridge and no iptables rules: everything here uses the host network.
  dockerd --bridge none --iptables=false --ip-masq=false --pidfile "$tmp/dockerd.pid" \
    >"$tmp/dockerd.log" 2>&1 &
  started_dockerd=$!
  if ! wait_for 300 "$docker" info; then
    cannot "dockerd cannot start here: $(grep -m1 -i -e 'error' -e 'fail' "$tmp/dockerd.log" | cut -c1-200)"
  fi
fi

# --- 1. base images --------------------------------------------------------------------------
phase "base images"
scripts/docker-base.sh

# compose's helper images, built while the inventoryd image compiles (they wait on apt's mirror,
# it on the CPU). The env files must exist for docker-compose to read docker-compose.yml.
ctoken=compose-test-$RANDOM$RANDOM
printf 'INVENTORY_ADMIN_TOKEN=%s\n' "$ctoken" >"$tmp/inventoryd.env"
export INVENTORY_ENV_FILE=$tmp/inventoryd.env
printf 'DB_PASSWORD=compose-db-%s\n' "$RANDOM$RANDOM" >"$tmp/inventory-db.env"
export INVENTORY_DB_ENV_FILE=$tmp/inventory-db.env
export INVENTORYD_TAG=test
# The services built from this repo's Dockerfile and context are the image step 2 builds and
# tests (inventoryd:test), so compose need not build them again; the others are its helpers.
docker-compose -p "$project" config >"$tmp/compose-config.yml" 2>"$tmp/compose.log" ||
  { tail -20 "$tmp/compose.log" >&2; fail "docker-compose config"; }
builds=$(python3 - "$tmp/compose-config.yml" "$repo" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
for name, svc in sorted(cfg["services"].items()):
    b = svc.get("build")
    if b is None:
        continue
    if b.get("dockerfile", "Dockerfile") not in ("Dockerfile", sys.argv[2] + "/Dockerfile"):
        print("helper", name)
    elif b.get("context") == sys.argv[2] and svc.get("image") == "inventoryd:test":
        print("own", name)
    else:
        print("BAD", name, b.get("context"), svc.get("image"))
PY
) || fail "reading docker-compose config"
! grep -q '^BAD' <<<"$builds" && grep -q '^own' <<<"$builds" ||
  fail "docker-compose.yml does not build inventoryd:\$INVENTORYD_TAG from this repo's Dockerfile: $builds"
mapfile -t helpers < <(sed -n 's/^helper //p' <<<"$builds")
docker-compose -p "$project" build "${helpers[@]}" >"$tmp/compose-build.log" 2>&1 &
helper_build=$!

# --- 2. the image ----------------------------------------------------------------------------
version=$(sed -n 's/^project(inventoryd VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
# A plain `docker build .` labels the image with the Dockerfile's default: it must not drift.
dflt=$(sed -n 's/^ARG VERSION=//p' Dockerfile)
[ "$dflt" = "$version" ] || fail "Dockerfile's ARG VERSION=$dflt, CMakeLists.txt says $version"
phase "docker build (inventoryd $version)"
"$docker" build --network host --build-arg "VERSION=$version" -t inventoryd:test . \
  >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; fail "docker build ."; }
label=$("$docker" image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' inventoryd:test)
[ "$label" = "$version" ] || fail "OCI version label is '$label', CMakeLists.txt says $version"
user=$("$docker" image inspect -f '{{.Config.User}}' inventoryd:test)
[[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "the image's USER is '$user', not a numeric non-root UID"
health=$("$docker" image inspect -f '{{json .Config.Healthcheck.Test}}' inventoryd:test)
[[ $health == *--healthcheck* ]] || fail "the HEALTHCHECK does not use inventoryd --healthcheck: $health"
extra=$("$docker" run --rm --network host --entrypoint /bin/sh inventoryd:test \
          -c 'for c in gcc cc cmake curl wget; do command -v $c; done; true')
[ -z "$extra" ] || fail "the runtime image holds build tools or curl: $extra"
"$docker" create --name "$container" inventoryd:test >/dev/null
"$docker" cp "$container:/usr/local/bin/inventoryd" "$tmp/inventoryd"
"$docker" rm "$container" >/dev/null
! readelf -S "$tmp/inventoryd" | grep -q '\.symtab' || fail "the binary in the image is not stripped"
echo "   image: version $version, USER $user, stripped, no compiler/curl"

# --- 3. the container ------------------------------------------------------------------------
phase "docker run"
free_port; rport=$port
mkdir -p "$tmp/redis" "$tmp/secrets"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$tmp/redis" --daemonize no \
  >"$tmp/redis.log" 2>&1 &
host_pids+=($!)
wait_for 100 redis-cli -p "$rport" ping || fail "redis-server did not start"
token=docker-test-$RANDOM$RANDOM$RANDOM
printf '%s\n' "$token" >"$tmp/secrets/admin_token"
# Readable by the container's user only.
chown "${user%%:*}" "$tmp/secrets/admin_token" 2>/dev/null || chmod 644 "$tmp/secrets/admin_token"
chmod 400 "$tmp/secrets/admin_token" 2>/dev/null || true
printf 'Authorization: Bearer %s\n' "$token" >"$tmp/auth.header"
free_port; hport=$port
"$docker" run -d --name "$container" --network host --health-interval 1s \
  -e INVENTORY_BIND=127.0.0.1 -e INVENTORY_PORT="$hport" \
  -e INVENTORY_REDIS_URL="redis://127.0.0.1:$rport" \
  -e INVENTORY_ADMIN_TOKEN_FILE=/run/secrets/admin_token \
  -v "$tmp/secrets:/run/secrets:ro" inventoryd:test >/dev/null
state() { "$docker" inspect -f "$1" "$container"; }
for _ in $(seq 120); do
  h=$(state '{{.State.Health.Status}}')
  [ "$h" = healthy ] && break
  [ "$(state '{{.State.Running}}')" = true ] || { "$docker" logs "$container" >&2; fail "the container exited"; }
  sleep 0.5
done
[ "$h" = healthy ] || { "$docker" logs "$container" >&2; state '{{json .State.Health}}' >&2; fail "not healthy after 60 s ($h)"; }
pid=$(state '{{.State.Pid}}')
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" != 0 ] || fail "inventoryd runs as root in the container"
echo "   healthy; inventoryd runs as uid $uid"
base=http://127.0.0.1:$hport
json=(-H 'Content-Type: application/json')
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "${json[@]}" -d '{"stock":10,"segments":2}' "$base/api/v1/skus/dk")
[ "$code" = 401 ] || fail "PUT without the token: $code (want 401)"
code=$(curl -s -o "$tmp/put.json" -w '%{http_code}' -X PUT -H "@$tmp/auth.header" "${json[@]}" \
  -d '{"stock":10,"segments":2}' "$base/api/v1/skus/dk")
[ "$code" = 201 ] || fail "PUT with the token: $code $(cat "$tmp/put.json")"
code=$(curl -s -o "$tmp/order.json" -w '%{http_code}' -X POST "${json[@]}" -d '{"sku":"dk","quantity":3}' "$base/api/v1/orders")
[ "$code" = 201 ] || fail "order: $code $(cat "$tmp/order.json")"
id=$(grep -o '"order_id":"[^"]*"' "$tmp/order.json" | cut -d'"' -f4)
curl -fsS -o /dev/null "$base/api/v1/orders/$id" || fail "GET the order $id"
[ "$(redis-cli -p "$rport" --scan --pattern 'inv:*' | wc -l)" -gt 0 ] || fail "nothing reached the host's Redis"
echo "   PUT 201, order 201 ($id), against the host's redis-server"
"$docker" stop -t 20 "$container" >/dev/null
exit_code=$(state '{{.State.ExitCode}}')
[ "$exit_code" = 0 ] || { "$docker" logs "$container" >&2; fail "exit status $exit_code after docker stop"; }
"$docker" logs "$container" 2>&1 | grep -q '"event":"stopped"' || fail "no clean-shutdown line in the log"
! "$docker" logs "$container" 2>&1 | grep -qF "$token" || fail "the admin token is in the container's log"
"$docker" rm "$container" >/dev/null
echo "   docker stop: exit 0"

# --- 4. docker-compose -----------------------------------------------------------------------
phase "docker-compose up"
free_port; export REDIS_PORT=$port
free_port; export INVENTORY_PORT_1=$port
free_port; export INVENTORY_PORT_2=$port
free_port; export INVENTORY_PORT_3=$port
free_port; export INVENTORY_LB_PORT=$port
free_port; export DB_PORT=$port
free_port; export SINK_METRICS_PORT=$port
export INVENTORY_LB_LISTEN=127.0.0.1
printf 'Authorization: Bearer %s\n' "$ctoken" >"$tmp/compose-auth.header"
compose_up=1
phase "docker-compose build (${helpers[*]}: waiting for the background build)"
build_rc=0
wait "$helper_build" || build_rc=$?
helper_build=""
[ "$build_rc" = 0 ] || { tail -40 "$tmp/compose-build.log" >&2; fail "docker-compose build ${helpers[*]}"; }
cat "$tmp/compose-build.log" >>"$tmp/compose.log"
phase "docker-compose up -d"
docker-compose -p "$project" up -d --no-build >>"$tmp/compose.log" 2>&1 || { tail -40 "$tmp/compose.log" >&2; fail "docker-compose up"; }
phase "waiting for nginx and the 3 instances to be ready"
lb=http://127.0.0.1:$INVENTORY_LB_PORT
ready_all() {
  curl -fsS -o /dev/null "$lb/readyz" && curl -fsS -o /dev/null "http://127.0.0.1:$INVENTORY_PORT_1/readyz" &&
    curl -fsS -o /dev/null "http://127.0.0.1:$INVENTORY_PORT_2/readyz" &&
    curl -fsS -o /dev/null "http://127.0.0.1:$INVENTORY_PORT_3/readyz"
}
wait_for 600 ready_all || { docker-compose -p "$project" logs --tail 30 >&2; fail "the compose set-up did not become ready"; }
aof=$(docker-compose -p "$project" exec -T redis redis-cli -p "$REDIS_PORT" config get appendonly | tail -1)
[ "$aof" = yes ] || fail "Redis runs without AOF (appendonly $aof)"
code=$(curl -s -o "$tmp/cput.json" -w '%{http_code}' -X PUT -H "@$tmp/compose-auth.header" "${json[@]}" \
  -d '{"stock":20,"segments":4}' "$lb/api/v1/skus/compose-sku")
[ "$code" = 201 ] || fail "PUT through nginx: $code $(cat "$tmp/cput.json")"
phase "selling out through nginx"
created=0 soldout=0 other=""
for _ in $(seq 26); do
  c=$(curl -s -o /dev/null -w '%{http_code}' -X POST "${json[@]}" -d '{"sku":"compose-sku"}' "$lb/api/v1/orders")
  case "$c" in 201) created=$((created + 1)) ;; 409) soldout=$((soldout + 1)) ;; *) other+="$c " ;; esac
done
[ -z "$other" ] || fail "unexpected answers through nginx: $other"
[ "$created" = 20 ] && [ "$soldout" = 6 ] || fail "sold $created (want 20), $soldout sold_out (want 6)"
status=$(curl -fsS -H "@$tmp/compose-auth.header" "$lb/api/v1/skus/compose-sku?consistent=1")
grep -q '"sold_out":true' <<<"$status" && grep -q '"remaining":0' <<<"$status" || fail "status after the sell-out: $status"
echo "   20 of 20 units sold through nginx and 3 instances, then 409 sold_out; Redis AOF on"
phase "the order log into MariaDB (inventory-sink)"
# As the sink's user, over TCP, the password from the container's environment (not a command line).
db_query() {
  docker-compose -p "$project" exec -T mariadb sh -c \
    'MYSQL_PWD=$DB_PASSWORD exec mariadb -h127.0.0.1 -P"$DB_PORT" -usink -N shop -e "$1"' sh "$1"
}
rows_created() { [ "$(db_query "SELECT COUNT(*) FROM orders WHERE sku='compose-sku' AND status='created'")" = 20 ]; }
wait_for 600 rows_created || {
  docker-compose -p "$project" logs --tail 30 sink mariadb >&2
  fail "the 20 orders did not reach MariaDB's orders table: $(db_query "SELECT status, COUNT(*) FROM orders GROUP BY status" 2>&1)"
}
docker-compose -p "$project" exec -T sink sh -c \
  'export INVENTORY_SINK_DB_URL="mysql://sink:$DB_PASSWORD@127.0.0.1:$DB_PORT/shop"; exec /usr/local/bin/inventory-sink reconcile --sku compose-sku' \
  >"$tmp/reconcile.out" 2>&1 || { cat "$tmp/reconcile.out" >&2; fail "inventory-sink reconcile: the database differs from Redis"; }
sink_metrics=$(curl -fsS "http://127.0.0.1:$SINK_METRICS_PORT/metrics") || fail "the sink's /metrics on $SINK_METRICS_PORT"
grep -q '^inventory_sink_events_written_total 2[0-9]$' <<<"$sink_metrics" ||
  fail "the sink wrote $(grep '^inventory_sink_events_written_total' <<<"$sink_metrics") (want 20 or more)"
! docker-compose -p "$project" logs sink mariadb 2>&1 | grep -qF "$(sed -n 's/^DB_PASSWORD=//p' "$tmp/inventory-db.env")" ||
  fail "the database password is in the sink's or MariaDB's log"
echo "   20 orders in MariaDB's orders table through inventory-sink; reconcile: the database equals Redis"
phase "docker-compose down"
docker-compose -p "$project" down -v --remove-orphans >>"$tmp/compose.log" 2>&1 || fail "docker-compose down"
compose_up=""
[ -z "$("$docker" ps -aq --filter "label=com.docker.compose.project=$project")" ] || fail "containers left after down"
echo "docker test: passed in $(($(date +%s) - t0)) s"
echo "docker-test: 1 passed, 0 failed"
