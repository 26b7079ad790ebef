#!/usr/bin/env bash
# How fast inventory-sink drains a backlog of order log entries into MariaDB, and what it costs
# in CPU (the sink's and mariadbd's, from /proc: steadier than the rate on a shared machine),
# for one or more sink binaries, alternated (A B A B ...) so drift of the machine's load hits
# each. Per run: a fresh database, a flushed Redis, --entries entries written straight into 16
# streams of one SKU in the orderlog.h format (EVAL of XADD: no inventoryd), then the sink
# started alone until it has written them all; events/s, and CPU µs per entry of the sink and
# of mariadbd. With --cart N every entry is a cart of N items (N order_items rows each; needs a
# sink that knows carts, issue 33). Issue 33 measured the order_items rows' cost with it
# (docs/performance.md, "The order log").
#
# Usage: loadtest/sinkdrain.sh [--entries N] [--runs R] [--cart N] [--out FILE] SINK...
#   --entries N  entries per run [100000];  --runs R  runs per binary [3];  --cart N  items [1]
# Env: none. Exit 0, 3 infrastructure. Not a test (scripts/test.sh does not run it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
entries=100000 runs=3 cart=1 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --entries) entries=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --cart) cart=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -*) echo "usage: $0 [--entries N] [--runs R] [--cart N] [--out FILE] SINK..." >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--entries N] [--runs R] [--cart N] [--out FILE] SINK..." >&2; exit 2; }
for t in redis-server redis-cli curl mariadb mariadb-install-db python3; do
  command -v "$t" >/dev/null || { echo "sinkdrain: $t is missing (scripts/deps.sh)" >&2; exit 3; }
done
mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
tmp=$(mktemp -d /tmp/inventoryd-sinkdrain.XXXXXX)
pids=()
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "sinkdrain: $*" >&2; exit 3; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
rcli() { redis-cli -p "$rport" "$@"; }
# The database as loadtest/orderlog.sh makes it (innodb_flush_log_at_trx_commit=1).
dport=$(free_port)
as_root=()
[ "$(id -u)" != 0 ] || as_root=(--user=root)
mariadb-install-db --no-defaults --datadir="$tmp/db" --auth-root-authentication-method=normal \
  --skip-test-db ${as_root[@]+"${as_root[@]}"} >"$tmp/db-install.log" 2>&1 || die "mariadb-install-db failed"
"$mariadbd" --no-defaults --datadir="$tmp/db" --bind-address=127.0.0.1 --port="$dport" \
  --socket="$tmp/db.sock" --log-error="$tmp/db-error.log" --pid-file="$tmp/db.pid" \
  --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=1 --skip-name-resolve \
  ${as_root[@]+"${as_root[@]}"} &
dpid=$!
pids+=("$dpid")
sql() { mariadb --no-defaults --socket="$tmp/db.sock" -uroot "$@"; }
for _ in $(seq 300); do sql -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
sql -e "CREATE USER 'sink'@'127.0.0.1' IDENTIFIED BY 'bench';" || die "MariaDB did not start"

# fill: the entries, round robin over 16 streams of SKU sd (a cart's other items in SKUs
# sd1..sd<N-1>, one unit in their segment 0)
fill() {
  rcli flushall >/dev/null
  rcli sadd inv:2:skus sd >/dev/null
  rcli hset 'inv:2:{sd}:meta' segments 16 hwm 16 version 1 >/dev/null
  local k per=$(( (entries + 15) / 16 ))
  for ((k = 0; k < 16; k++)); do
    rcli eval "
      local at = string.format('%d', redis.call('TIME')[1] * 1000)
      for i = 1, tonumber(ARGV[2]) do
        local id = string.format('%032x-%s-sd', i * 16 + tonumber(ARGV[1]), ARGV[1])
        if tonumber(ARGV[3]) > 1 then
          local items = {'sd:' .. ARGV[1] .. ':1'}
          for j = 1, tonumber(ARGV[3]) - 1 do items[#items + 1] = 'sd' .. j .. ':0:1' end
          redis.call('XADD', KEYS[1], '*', 'event', 'created', 'order', id, 'sku', 'sd',
                     'segment', ARGV[1], 'user', 'u' .. (i % 1000), 'quantity', '1', 'at', at,
                     'version', '1', 'parts', ARGV[1] .. ':1', 'items', table.concat(items, ','))
        else
          redis.call('XADD', KEYS[1], '*', 'event', 'created', 'order', id, 'sku', 'sd',
                     'segment', ARGV[1], 'user', 'u' .. (i % 1000), 'quantity', '1', 'at', at,
                     'version', '1')
        end
      end
      return 1" 1 "inv:2:{sd/$k}:log" "$k" "$per" "$cart" >/dev/null || die "fill failed"
  done
  echo $((per * 16))
}

rows=()
for ((r = 0; r < runs; r++)); do
  for bin in "$@"; do
    [ -x "$bin" ] || die "no sink binary $bin"
    sql -e "DROP DATABASE IF EXISTS shop; CREATE DATABASE shop;
            GRANT SELECT, INSERT, UPDATE, CREATE ON shop.* TO 'sink'@'127.0.0.1';" || die "reset db"
    total=$(fill)
    mport=$(free_port)
    "$bin" --redis "redis://127.0.0.1:$rport" --db "mysql://sink:bench@127.0.0.1:$dport/shop" \
      --metrics-port "$mport" --consumer bench --log-level warn 2>"$tmp/sink.log" &
    spid=$!
    pids+=("$spid")
    d0=$(proc_cpu "$dpid") s0=$(proc_cpu "$spid") t0=$(date +%s.%N)
    w=0
    for _ in $(seq 6000); do
      w=$(curl -sf "http://127.0.0.1:$mport/metrics" | awk '$1 == "inventory_sink_events_written_total" { printf "%d", $2 }')
      [ "${w:-0}" -ge "$total" ] && break
      sleep 0.05
    done
    t1=$(date +%s.%N) d1=$(proc_cpu "$dpid") s1=$(proc_cpu "$spid")
    kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    [ "${w:-0}" -ge "$total" ] || { cat "$tmp/sink.log" >&2; die "$bin wrote ${w:-0} of $total"; }
    row=$(awk -v n="$total" -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v d0="$d0" -v d1="$d1" \
      'BEGIN { printf "%.0f|%.1f|%.1f", n / (t1 - t0), (s1 - s0) * 1e6 / n, (d1 - d0) * 1e6 / n }')
    rows+=("$bin|$total|$row|$(cut -d' ' -f1 /proc/loadavg)")
    echo "sinkdrain: $bin: $total entries: events/s|sink µs/entry|mariadbd µs/entry = $row" >&2
  done
done
{
  echo "# loadtest/sinkdrain.sh — $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null); --cart $cart; $(nproc) cores"
  echo
  echo "| sink | entries | events/s | sink CPU µs/entry | mariadbd CPU µs/entry | load (1 min) |"
  echo "|---|---|---|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
} | tee ${out:+"$out"}
