#!/usr/bin/env bash
# The SPEC §9 peers (loadtest/peers/: the seeds' algorithm in Go, Node and OpenResty, and
# OpenResty's lockless one-script decrement) still build, start and sell, so that
# loadtest/peers.sh can measure them: each against a redis-server on a free port, a SKU of 5
# units in 4 segments, then
#   - one order: 201 with the order's "quantity":1, one record in Redis, one unit gone;
#   - 19 more orders at once (8 in parallel): exactly 4 more 201 (the other segments found
#     through the fail-over), the rest 409 sold_out; every segment at 0, 5 records;
#   - an order after the sell-out: 409 sold_out; an unknown SKU: 404; a bad body: 400.
# A few seconds. Skips (exit 77) when the peers' packages are missing (scripts/deps.sh --peers),
# except under CI=true.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$repo/loadtest/peers/lib.sh"
t_need go node nginx redis-server redis-cli curl xargs
if ! peers_build "$t_dir/bin" 2>"$t_dir/build.log"; then
  cat "$t_dir/build.log" >&2
  if [ "${CI:-}" = true ]; then echo "peers_test: the peers do not build; CI=true: failing" >&2; exit 1; fi
  grep -q "is missing" "$t_dir/build.log" || exit 1
  echo "peers_test: SKIPPED: a peer's package is missing (scripts/deps.sh --peers installs them)"
  exit 77
fi

t_port; redis_port=$port
t_redis "$redis_port"

# post PORT BODY: one order; prints "<status> <body>".
post() {
  local f=$t_dir/body.$BASHPID code
  code=$(curl -sS --max-time 5 -o "$f" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:$1/api/v1/orders") || true
  # one write per answer: the parallel posts share the output file
  printf '%s %s\n' "$code" "$(cat "$f" 2>/dev/null)"
  rm -f "$f"
}
export -f post
export t_dir

# status_is WANT ANSWER [BODY_PATTERN]
status_is() { [[ $2 == "$1 "* ]] && { [ -z "${3:-}" ] || [[ $2 == *"$3"* ]]; }; }

for kind in $peer_kinds; do
  sku=peer-$kind
  peer_preheat "$redis_port" "$sku" 5 4
  t_port; p=$port
  peer_launch "$kind" "$p" "$redis_port" 4 "$t_dir/$kind" "$t_dir/$kind.log"
  t_pids+=("$peer_pid")
  if ! t_wait 150 curl -fsS --max-time 1 "http://127.0.0.1:$p/healthz"; then
    cat "$t_dir/$kind.log" "$t_dir/$kind/error.log" >&2 2>/dev/null || true
    t_check "$kind: starts" false
    continue
  fi
  a=$(post "$p" "{\"sku\":\"$sku\",\"quantity\":1}")
  t_check "$kind: one order 201 with quantity 1 ($a)" status_is 201 "$a" '"quantity":1'
  t_check "$kind: its record in Redis, 4 units left" \
    peer_verify "$redis_port" "$sku" 5 4 1 1 0
  seq 19 | xargs -P 8 -I{} bash -c "post $p '{\"sku\":\"$sku\",\"quantity\":1}'" >"$t_dir/$kind.burst"
  n201=$(grep -c '^201 ' "$t_dir/$kind.burst" || true)
  n409=$(grep -c '^409 .*"sold_out"' "$t_dir/$kind.burst" || true)
  t_check "$kind: 19 concurrent orders for 4 units: 4 × 201, 15 × 409 sold_out (got $n201, $n409)" \
    test "$n201" = 4 -a "$n409" = 15
  t_check "$kind: sold out exactly, no segment below 0, 5 records" \
    peer_verify "$redis_port" "$sku" 5 4 5 5 0
  a=$(post "$p" "{\"sku\":\"$sku\"}")
  t_check "$kind: after the sell-out 409 sold_out ($a)" status_is 409 "$a" '"sold_out"'
  a=$(post "$p" '{"sku":"no-such-sku","quantity":1}')
  t_check "$kind: unknown SKU 404 ($a)" status_is 404 "$a" '"unknown_sku"'
  a=$(post "$p" '{"quantity":1}')
  t_check "$kind: no sku 400 ($a)" status_is 400 "$a"
  kill "$peer_pid" 2>/dev/null || true
done
t_done
