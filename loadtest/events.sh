#!/usr/bin/env bash
# loadtest/events.sh — the status event streams at scale (issue 30, SPEC §15; docs/performance.md
# "Status events"): N subscribers (default 10,000) of one SKU's GET /api/v1/skus/{sku}/events on
# one inventoryd, then K changes (orders of one unit, at a random phase of the refresh); reports
# the delay from each change to each subscriber's receipt of it (p50, p99, max: the target is
# p99 within --status-refresh-ms + 50 ms), the server's RSS per subscriber, and the Redis status
# reads per second while they listen (one per refresh, whatever N). Not part of scripts/test.sh
# (about a minute; 10,000 connections).
#
#   loadtest/events.sh [-n N] [-k K] [--refresh-ms MS] [--threads T] [--connection-memory-kib M]
#                      [--server BIN] [--perf FILE] [--floor]
#
# (--connection-memory-kib: inventoryd's per-connection pool, most of a subscriber's memory;
# default 24, inventoryd's own default. --server: another inventoryd binary, e.g. an older build
# for a before/after in one run. --perf: `perf record -g` of the server while the changes are
# made, written to FILE, for `perf report -i FILE`. --floor: then the same fan-out without
# inventoryd, `sse_fanout --floor N K T`: T threads writing one 1,400-byte message to each of N
# loopback connections per round, a process reading them as the client does; its CPU per message
# and round time are the machine's floor for any server that writes once per subscriber.)
#
# Needs the build (cmake --build build: bin/inventoryd, bin/sse_fanout) and redis-server.
# Raises the open-file limit (ulimit -n) to what the hard limit allows. Prints one JSON line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=10000 k=20 refresh=250 threads=2 mem=24 server="" perf="" floor=0
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    -k) k=$2; shift 2 ;;
    --refresh-ms) refresh=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --connection-memory-kib) mem=$2; shift 2 ;;
    --server) server=$2; shift 2 ;;
    --perf) perf=$2; shift 2 ;;
    --floor) floor=1; shift ;;
    *) echo "usage: $0 [-n N] [-k K] [--refresh-ms MS] [--threads T] [--connection-memory-kib M] [--server BIN] [--perf FILE] [--floor]" >&2; exit 2 ;;
  esac
done
want=$((n + 512))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
  echo "events.sh: the hard open-file limit ($hard) is below $want: lower -n or raise it" >&2
  exit 2
fi
ulimit -n "$want"
server=${server:-$build/bin/inventoryd}
for f in "$server" "$build/bin/sse_fanout"; do
  [ -x "$f" ] || { echo "events.sh: $f missing (cmake --build build)" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/events-bench.XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
rport=$(free_port) hport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  >"$dir/redis.log" 2>&1 &
rpid=$!
ipid=""
cleanup() {
  [ -n "$ipid" ] && kill -TERM "$ipid" 2>/dev/null && wait "$ipid" 2>/dev/null || true
  kill -TERM "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$server" --port "$hport" --bind 127.0.0.1 --redis "redis://127.0.0.1:$rport" \
  --admin-allow-loopback --threads "$threads" --status-refresh-ms "$refresh" \
  --max-subscribers $((n + 100)) --max-connections $((n + 200)) --connection-memory-kib "$mem" --log-level warn \
  >"$dir/inventoryd.log" 2>&1 &
ipid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/healthz" >/dev/null && break; sleep 0.1; done
curl -sf -XPUT -H 'Content-Type: application/json' -d '{"stock":1000000,"segments":16}' \
  "http://127.0.0.1:$hport/api/v1/skus/events-bench" >/dev/null
if [ -n "$perf" ]; then
  # from the start of the changes (sse_fanout says "ready" on stderr) to the end of its run
  ( for _ in $(seq 1200); do grep -q ready "$dir/fanout.err" 2>/dev/null && break; sleep 0.1; done
    exec perf record -g -o "$perf" -p "$ipid" >"$dir/perf.log" 2>&1 ) &
  ppid=$!
fi
rc=0
out=$("$build/bin/sse_fanout" "$hport" events-bench "$n" "$k" "$ipid" "$refresh" \
  2> >(tee "$dir/fanout.err" >&2)) || rc=$?
if [ -n "$perf" ]; then kill -INT "$ppid" 2>/dev/null; wait "$ppid" 2>/dev/null || true; fi
extra=""
if [ "$floor" = 1 ]; then
  f=$("$build/bin/sse_fanout" --floor "$n" "$k" "$threads") || rc=$?
  f=${f#\{}
  extra=",${f%\}}"
fi
echo "${out%\}},\"refresh_ms\":$refresh,\"threads\":$threads,\"connection_memory_kib\":$mem$extra}"
exit $rc
