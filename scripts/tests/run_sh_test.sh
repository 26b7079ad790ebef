#!/usr/bin/env bash
# scripts/run.sh as a user runs it (issue #10, "Secrets" and "Admin behind a proxy"), three ways:
#   A. INVENTORY_REDIS_URL with a password: the password is in no process's command line and not
#      in run.sh's output; the admin token run.sh generates is not printed either;
#   B. --admin-token T given by the user: the preheat uses it, T is in no command line and not
#      in the output, a wrong token is refused;
#   C. --config FILE that sets the port and the admin token file: run.sh does not override them;
#   D. --cluster (issue 12): a private local Redis Cluster, the demo on it, and no node left
#      running after Ctrl-C;
#   E. --with-db (issue 21): a private MariaDB and one inventory-sink beside the demo; an order
#      placed with the printed curl line shows up in the orders table through the printed
#      `mariadb` line, the database password is in no command line and not in the output, and
#      nothing is left running after Ctrl-C;
#   F. REDIS_PORT taken by a Redis that is not run.sh's: run.sh says so and exits non-zero
#      instead of putting the demo into that Redis.
# Each time every curl line run.sh prints is run exactly as printed and must succeed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -x "$bin" ] || { echo "no inventoryd at $bin (build first)" >&2; exit 1; }

# start_run NAME [run.sh args...]: starts scripts/run.sh in the background (output in
# $t_dir/NAME.out) and waits until it says it is up. Sets run_pid.
start_run() {
  local name=$1; shift
  mkdir -p "$t_dir/$name"
  RUN_DIR=$t_dir/$name RUN_SKIP_BUILD=1 BUILD_DIR=$build_dir \
    setsid "$repo/scripts/run.sh" "$@" >"$t_dir/$name.out" 2>"$t_dir/$name.err" &
  run_pid=$!
  t_pids+=("$run_pid")
  if ! t_wait "${START_TENTHS:-300}" grep -q 'Press Ctrl-C' "$t_dir/$name.out"; then
    echo "run.sh ($name) did not come up:" >&2
    cat "$t_dir/$name.out" "$t_dir/$name.err" >&2
    return 1
  fi
}

# stop_run: SIGTERM for run.sh, as Ctrl-C would (its trap stops what it started; a background
# job ignores SIGINT).
stop_run() {
  kill -TERM "$run_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$run_pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 -- "-$run_pid" 2>/dev/null || true
}

# no_cmdline_has SECRET: no process on the machine has SECRET on its command line.
no_cmdline_has() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' ' ' 2>/dev/null <"$f" | grep -qF -- "$1"; then
      echo "     $f: $(tr '\0' ' ' <"$f" | cut -c1-200)" >&2
      return 1
    fi
  done
}

# inventoryd_cmdline_lacks SECRET ARGS: an inventoryd (argv[0] .../inventoryd) runs with ARGS on
# its command line, and none such has SECRET there. (A pgrep -f -n for ARGS found the newest
# match: the checking shell itself, whose command line holds both, or a fork of it turned into
# tr; so the check never read inventoryd's and passed or failed by the race.)
inventoryd_cmdline_lacks() {
  local f cmd n=0
  for f in /proc/[0-9]*/cmdline; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    [[ ${cmd%% *} == */inventoryd && $cmd == *" $2"* ]] || continue
    n=$((n + 1))
    if [[ $cmd == *"$1"* ]]; then
      echo "     $f: ${cmd:0:200}" >&2
      return 1
    fi
  done
  [ "$n" -ge 1 ] || { echo "     no inventoryd runs with '$2' on its command line" >&2; return 1; }
}

# curl_lines_work NAME: runs every "  curl" line of run.sh's output as printed; each must exit 0
# with an answer that is not an error.
curl_lines_work() {
  local line out n=0
  while IFS= read -r line; do
    n=$((n + 1))
    if ! out=$(bash -c "$line" 2>&1) || [ -z "$out" ] || grep -q '"error"' <<<"$out"; then
      echo "     as printed: $line" >&2
      echo "     answered:   ${out:0:300}" >&2
      return 1
    fi
  done < <(grep '^  curl ' "$t_dir/$1.out")
  [ "$n" -ge 7 ]
}

# A. A Redis with a password, given by INVENTORY_REDIS_URL.
pw=RunSh-Redis-Pass-$RANDOM$RANDOM
t_port; rport=$port
printf 'requirepass %s\n' "$pw" >"$t_dir/redis.conf"
mkdir -p "$t_dir/redis-data"
redis-server "$t_dir/redis.conf" --port "$rport" --bind 127.0.0.1 --save "" --dir "$t_dir/redis-data" \
  >"$t_dir/redis.log" 2>&1 &
t_pids+=($!)
t_wait 100 bash -c "exec 3<>/dev/tcp/127.0.0.1/$rport"
t_port; hport=$port
INVENTORY_REDIS_URL=redis://:$pw@127.0.0.1:$rport INVENTORY_PORT=$hport start_run A
t_check "A: inventoryd answers on the port asked for" curl -fsS -o /dev/null "http://127.0.0.1:$hport/readyz"
t_check "A: the Redis password is in no command line" no_cmdline_has "$pw"
t_check "A: the Redis password is not in the output" bash -c "! grep -qF -- '$pw' '$t_dir/A.out' '$t_dir/A.err'"
t_check "A: the URL is printed masked" grep -qF ":***@127.0.0.1:$rport" "$t_dir/A.out"
gen=$(cat "$t_dir/A/admin-token")
t_check "A: the generated admin token is not in the output" bash -c "! grep -qF -- '$gen' '$t_dir/A.out' '$t_dir/A.err'"
t_check "A: the generated admin token is in no command line" no_cmdline_has "$gen"
t_check "A: every printed curl line works as printed" curl_lines_work A
t_check "A: admin without the token is refused" \
  test "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$hport/api/v1/skus/demo-sku")" = 401
stop_run
t_check "A: the secret files are gone after Ctrl-C" \
  bash -c "[ ! -e '$t_dir/A/admin-token' ] && [ ! -e '$t_dir/A/redis-url' ]"

# B. The user's own token on run.sh's command line; a private Redis.
tok=RunSh-User-Token-$RANDOM$RANDOM
t_port; hport=$port
t_port; rport=$port
INVENTORY_PORT=$hport REDIS_PORT=$rport start_run B --admin-token "$tok" --threads 2
t_check "B: the preheat used the token (demo SKU exists)" \
  curl -fsS -o /dev/null "http://127.0.0.1:$hport/api/v1/skus/demo-sku"
t_check "B: inventoryd's command line does not carry the token" \
  inventoryd_cmdline_lacks "$tok" "--admin-token-file $t_dir/B/"
t_check "B: the token is not in the output" bash -c "! grep -qF -- '$tok' '$t_dir/B.out' '$t_dir/B.err'"
t_check "B: every printed curl line works as printed" curl_lines_work B
t_check "B: a wrong token is refused" \
  test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nope' -X DELETE "http://127.0.0.1:$hport/api/v1/skus/demo-sku")" = 401
stop_run

# C. --config FILE setting the port and the admin token file: run.sh must not override them.
t_port; cport=$port
t_port; rport=$port
printf 'RunSh-Config-Token-%s\n' "$RANDOM" >"$t_dir/config-token"
chmod 600 "$t_dir/config-token"
printf '{"port": %d, "admin_token_file": "%s", "log_level": "info"}\n' "$cport" "$t_dir/config-token" \
  >"$t_dir/config.json"
REDIS_PORT=$rport start_run C --config "$t_dir/config.json"
t_check "C: inventoryd listens on the config file's port" curl -fsS -o /dev/null "http://127.0.0.1:$cport/readyz"
t_check "C: and the printed lines use it" grep -q "http://127.0.0.1:$cport/" "$t_dir/C.out"
t_check "C: the config file's token works (preheat, printed lines)" curl_lines_work C
t_check "C: the config file's token is what inventoryd wants" \
  test "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$t_dir/config-token")" \
    -X DELETE "http://127.0.0.1:$cport/api/v1/skus/other-sku")" = 204
stop_run

# D. --cluster: the demo on a private Redis Cluster (scripts/cluster.sh), stopped with run.sh.
t_port; hport=$port
INVENTORY_PORT=$hport start_run D --cluster --threads 2
t_check "D: inventoryd runs on a redis-cluster:// URL" grep -q 'Redis: redis-cluster://' "$t_dir/D.out"
t_check "D: every printed curl line works as printed" curl_lines_work D
d_ports=$(cat "$t_dir/D/cluster/ports")
t_check "D: the demo SKU's segments sit on three masters" bash -c "
  n=0; for p in $d_ports; do
    redis-cli -p \$p ROLE | head -1 | grep -q master || continue
    [ \"\$(redis-cli -p \$p --scan --pattern 'inv:2:{demo-sku/*}:stock' | wc -l)\" -gt 0 ] && n=\$((n + 1))
  done; [ \$n -eq 3 ]"
stop_run
t_check "D: no cluster node is left after Ctrl-C" bash -c "
  for p in $d_ports; do ! redis-cli -p \$p PING >/dev/null 2>&1 || exit 1; done"
t_check "D: the cluster's dir is gone" test ! -e "$t_dir/D/cluster"

# E. --with-db: MariaDB + inventory-sink; an order reaches the orders table.
t_port; hport=$port
t_port; rport=$port
t_port; dport=$port
t_port; mport=$port
START_TENTHS=600 INVENTORY_PORT=$hport REDIS_PORT=$rport DB_PORT=$dport SINK_METRICS_PORT=$mport \
  start_run E --with-db --threads 2
t_check "E: every printed curl line works as printed (the sink's /metrics too)" curl_lines_work E
query=$(grep '^  mariadb ' "$t_dir/E.out" | sed 's/^  //')
t_check "E: a mariadb line is printed, on the database's port" grep -q "MariaDB (127.0.0.1:$dport" "$t_dir/E.out"
e_id=$(curl -fsS -X POST -H 'Content-Type: application/json' -d '{"sku":"demo-sku","quantity":3,"user_id":"erin"}' \
  "http://127.0.0.1:$hport/api/v1/orders" | sed -n 's/.*"order_id":"\([^"]*\)".*/\1/p')
in_db() { bash -c "$query" 2>/dev/null | grep -P "^$e_id\tdemo-sku\terin\t3\tcreated\t"; }
t_check "E: the order ($e_id) is in the orders table, as the printed line shows it" t_wait 100 in_db
e_pw=$(sed -n 's/^password=//p' "$t_dir/E/db-client.cnf")
t_check "E: the database password is not in the output" bash -c "! grep -qF -- '$e_pw' '$t_dir/E.out' '$t_dir/E.err'"
t_check "E: the database password is in no command line" no_cmdline_has "$e_pw"
t_check "E: the sink's user has exactly SELECT, INSERT, UPDATE, CREATE on shop" bash -c "
  mariadb --no-defaults --socket='$t_dir/E/mariadb/sock' -uroot -N -e \"SHOW GRANTS FOR 'sink'@'127.0.0.1'\" |
    grep -q 'GRANT SELECT, INSERT, UPDATE, CREATE ON \`shop\`.\* TO'"
e_db_pid=$(cat "$t_dir/E/mariadb/mariadbd.pid")
e_sink_pid=$(pgrep -f -n -- "inventory-sink --config $t_dir/E/sink.json")
stop_run
t_check "E: no mariadbd and no inventory-sink left after Ctrl-C" \
  bash -c "! kill -0 $e_db_pid 2>/dev/null && ! kill -0 ${e_sink_pid:-0} 2>/dev/null"
t_check "E: the secret files are gone" \
  bash -c "[ ! -e '$t_dir/E/db-client.cnf' ] && [ ! -e '$t_dir/E/sink.json' ]"

# F. REDIS_PORT already taken by someone else's Redis.
t_port; rport=$port
t_redis "$rport"
t_port; hport=$port
mkdir -p "$t_dir/F"
t_check "F: run.sh refuses a REDIS_PORT another Redis holds" bash -c "
  ! RUN_DIR='$t_dir/F' RUN_SKIP_BUILD=1 BUILD_DIR='$build_dir' INVENTORY_PORT=$hport REDIS_PORT=$rport \
    timeout 30 '$repo/scripts/run.sh' >'$t_dir/F.out' 2>'$t_dir/F.err' &&
  grep -q 'did not start on port $rport' '$t_dir/F.err'"
t_check "F: and wrote nothing into it" test "$(redis-cli -p "$rport" DBSIZE)" = 0
t_done
