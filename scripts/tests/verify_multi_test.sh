#!/usr/bin/env bash
# loadtest/verify.sh on multi-segment orders (docs/design.md "Orders larger than one segment"):
# a SKU's keys written by hand into a real redis-server (no inventoryd), then verify.sh must
# pass each good state and fail each bad one — a part without its primary, a primary missing a
# part, a status mismatch, parts not summing to the order — with a lagging part allowed under
# its queued follow and orphan parts under their intent only with --pending-ok, and a follow
# drained while verify.sh waits for it. ~3 s.
set -euo pipefail
# shellcheck source=scripts/tests/lib.sh
source "$(dirname "$0")/lib.sh"
t_need redis-server redis-cli
t_port
rport=$port
t_redis "$rport"
verify=$repo/loadtest/verify.sh
S=ck
A=0123456789abcdef0123456789abcdef
B=fedcba9876543210fedcba9876543210
r() { redis-cli -p "$rport" "$@" >/dev/null; }
primary() { # status quantity parts-json
  r HSET "inv:2:{$S/0}:orders" "$A-0-$S" "{\"order_id\":\"$A-0-$S\",\"sku\":\"$S\",\"segment\":0,\"quantity\":$2,\"status\":\"$1\",\"user_id\":\"u1\",\"parts\":$3}"
}
part() { # k quantity status [part_of]
  r HSET "inv:2:{$S/$1}:orders" "$A-$1-$S" "{\"order_id\":\"$A-$1-$S\",\"part_of\":\"${4:-$A-0-$S}\",\"sku\":\"$S\",\"segment\":$1,\"quantity\":$2,\"status\":\"$3\"}"
}
counters() { # k s o r
  r SET "inv:2:{$S/$1}:stock" $((10 - $2))
  r HSET "inv:2:{$S/$1}:cnt" t 10 s "$2" o "$3" r "$4"
}
P3='[{"segment":0,"quantity":5},{"segment":1,"quantity":4},{"segment":2,"quantity":3}]'
good() { # order A: 12 units as 5 + 4 + 3 over segments 0..2; order B: a hold of 2 in segment 1
  r FLUSHALL
  r HSET "inv:2:{$S}:meta" version 7 segments 3 stock 30 state r hwm 3
  for k in 0 1 2; do r SET "inv:2:{$S/$k}:sver" 7; done
  primary created 12 "$P3"
  part 1 4 created
  part 2 3 created
  r HSET "inv:2:{$S/1}:orders" "$B-1-$S" "{\"order_id\":\"$B-1-$S\",\"sku\":\"$S\",\"segment\":1,\"quantity\":2,\"status\":\"reserved\",\"user_id\":\"u2\",\"expires_at\":\"2030-01-01T00:00:00.000Z\"}"
  r ZADD "inv:2:{$S/1}:due" 1893456000000 "$B-1-$S"
  counters 0 5 1 0
  counters 1 6 1 2
  counters 2 3 0 0
}
# judge WANT(0|1) WHAT [verify.sh options]: verify.sh's exit and, on a surprise, its output
judge() {
  local want=$1 what=$2 out rc=0; shift 2
  out=$("$verify" --redis-port "$rport" --sku "$S" "$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "$what: verify.sh exit $rc, want $want:" >&2; echo "$out" >&2; return 1
  fi
}
good
t_check "a whole order of 3 parts passes" judge 0 "good" --units 14 --orders 2
t_check "its sold units are every part's, its orders 2, not 4" \
  bash -c "'$verify' --redis-port $rport --sku $S | grep -q 'sold=14 orders=2 .*multi_orders=1 live_parts=2'"
good; r HDEL "inv:2:{$S/0}:orders" "$A-0-$S"; counters 0 0 0 0
t_check "parts without their primary fail" judge 1 "orphans"
r HSET "inv:2:{$S}:multi" "$A" '{"order":"x","parts":[[0,5],[1,4],[2,3]],"deadline":1}'
t_check "orphan parts under their intent pass with --pending-ok" judge 0 "orphans+intent" --pending-ok
t_check "... and fail the quiescent check" judge 1 "orphans+intent, strict" --drain-s 0
good; r HDEL "inv:2:{$S/2}:orders" "$A-2-$S"; counters 2 0 0 0
t_check "a primary missing a part fails" judge 1 "missing part"
good; primary confirmed 12 "$P3"; part 1 4 confirmed
t_check "a confirmed order's part still created fails" judge 1 "status"
r ZADD "inv:2:{$S/0}:follow" 1 "$A-2-$S|confirmed"
t_check "... passes under its queued follow with --pending-ok" judge 0 "follow" --pending-ok
t_check "... and fails the quiescent check" judge 1 "follow, strict" --drain-s 0
# a follow the sweeper applies while verify.sh waits (--drain-s, 10 s by default): passes
part 2 3 confirmed
(sleep 1; r DEL "inv:2:{$S/0}:follow") &
t_check "... and passes once it drained while verify.sh waited" judge 0 "follow drained"
good; part 2 3 cancelled; counters 2 0 0 0
t_check "a live order with a cancelled part fails" judge 1 "cancelled part"
good; primary created 13 "$P3"
t_check "parts not summing to the quantity fail" judge 1 "sum"
good; part 2 2 created; counters 2 2 0 0
t_check "a part whose quantity its primary does not list fails" judge 1 "part quantity"
good; counters 0 12 1 0; r SET "inv:2:{$S/0}:stock" 0; r HSET "inv:2:{$S/0}:cnt" t 12
t_check "a segment counting the whole order's units fails" judge 1 "units"
good; part 1 4 created "$B-1-$S"
t_check "a part naming another order fails" judge 1 "part_of"
t_done
