#!/usr/bin/env bash
# loadtest/locks.sh (every lock on the same sale, issue 24) without running it: its arguments
# (bad ones exit 2 and say why, starting nothing), its plan with this build's inventoryd (every
# kind) and with one that has no --lock-zookeeper (the ZooKeeper rows skipped, or exit 2 when
# asked for by name), and --self-test: the rates, stalls and per-order figures of its report
# computed on a made-up timeline. Under a second.
set -euo pipefail
# shellcheck source=scripts/tests/lib.sh
source "$(dirname "$0")/lib.sh"
[ -x "$bin" ] || { echo "no inventoryd at $bin (build first)" >&2; exit 1; }
locks=$repo/loadtest/locks.sh

# exits CODE CMD...: CMD exits with CODE (output in $t_dir/out).
exits() {
  local want=$1 rc=0; shift
  "$@" >"$t_dir/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { echo "  exit $rc, expected $want:" >&2; sed 's/^/    /' "$t_dir/out" >&2; return 1; }
}
says() { grep -q -- "$1" "$t_dir/out" || { echo "  no '$1' in:" >&2; sed 's/^/    /' "$t_dir/out" >&2; return 1; }; }
nothing_started() { [ ! -e "$repo/loadtest/results/locks-dry" ]; }

export INVENTORYD_BIN=$bin
t_check "--help exits 0 with the usage" exits 0 "$locks" --help
t_check "... which names every kind" says "redis1,redlock3,redlock5,cluster,zk1,zk3,mysql"
for bad in "--kinds redis2" "--kinds zk1,nope" "--phases hold1" "--window 1" "--window x" \
  "--instances 0" "--instances 9" "--frobnicate" "--kinds"; do
  # shellcheck disable=SC2086 # the words of one bad command line
  t_check "bad arguments '$bad' exit 2" exits 2 "$locks" $bad --dry-run --out "$repo/loadtest/results/locks-dry"
done
t_check "... and start nothing" nothing_started
t_check "LT_FAULT_WINDOW_S=3 exits 2" exits 2 env LT_FAULT_WINDOW_S=3 "$locks" --dry-run
t_check "an inventoryd that is not there exits 3" exits 3 env INVENTORYD_BIN="$t_dir/none" "$locks" --dry-run

t_check "--dry-run with this build exits 0" exits 0 "$locks" --dry-run
for k in redis1 redlock3 redlock5 cluster zk1 zk3 mysql; do
  t_check "... and plans $k" says "^  $k: "
done
t_check "... 3 instances behind nginx by default" says "3× inventoryd .* behind nginx"
t_check "... ZooKeeper through --lock-zookeeper" says "zk3: ZooKeeper, 3 nodes; inventoryd --lock-zookeeper"
t_check "--instances 1: wrk straight to it" exits 0 "$locks" --dry-run --instances 1
t_check "... says so" says "1× inventoryd .*, wrk straight to it"

# An inventoryd from before --lock-zookeeper: its --help lists --lock-mysql only.
old=$t_dir/inventoryd-old
printf '#!/bin/sh\necho "  --redis URL"; echo "  --lock-redis URLS"; echo "  --lock-mysql URL"\n' >"$old"
chmod +x "$old"
t_check "without --lock-zookeeper: the default plan exits 0" exits 0 env INVENTORYD_BIN="$old" "$locks" --dry-run
t_check "... with the ZooKeeper rows skipped" says "zk1: skipped (.* has no --lock-zookeeper)"
t_check "... and MySQL planned" says "^  mysql: MariaDB"
t_check "... --kinds zk3 asked for by name exits 2" exits 2 env INVENTORYD_BIN="$old" "$locks" --kinds zk3 --dry-run
t_check "... saying why" says "kind zk3 needs an inventoryd with --lock-zookeeper"

# An inventoryd whose --help goes on long after the options locks.sh looks for: read through
# `grep -q` under pipefail, its SIGPIPE used to drop the MySQL and ZooKeeper rows.
long=$t_dir/inventoryd-long
printf '#!/bin/sh\necho "  --lock-mysql URL"; echo "  --lock-zookeeper HOSTS"\nseq 1 200000\n' >"$long"
chmod +x "$long"
t_check "a long --help: every kind planned" exits 0 env INVENTORYD_BIN="$long" "$locks" --dry-run
t_check "... MySQL" says "^  mysql: MariaDB"
t_check "... ZooKeeper" says "^  zk3: ZooKeeper"

t_check "--self-test: rates, stalls and per-order figures" exits 0 "$locks" --self-test
t_check "... every one checked" says "ok   stall to the end = 1600"
t_done
