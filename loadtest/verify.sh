#!/usr/bin/env bash
# Checks the SPEC §8 invariants of one SKU from Redis directly, against the load generator's
# own count of 201 answers, and optionally against the service's status endpoint. The state
# invariants are inventory-check's (tools/check/: the one checker, which the integration tests'
# SF_ASSERT_INVARIANTS runs too; its key names come from service/store_keys.txt); this script
# adds the comparisons with what the client counted and with GET status.
#
# Usage: loadtest/verify.sh --redis-port P --sku S [options]
#        loadtest/verify.sh --redis-cluster URL --sku S [options]
#   --redis-host H        Redis host (127.0.0.1)
#   --redis-cluster URL   a Redis Cluster instead (redis-cluster://host:port[,…], any of its
#                         nodes: inventory-check takes the slot map from the first that answers,
#                         and reads again, whole, while a failover settles)
#   --units U             units in 201 answers counted by wrk (order.lua's `units`)
#   --orders N            number of 201 answers counted by wrk (`created`)
#   --unanswered X        requests wrk sent without getting an answer (0: exact comparison)
#   --max-qty Q           largest quantity one of those requests asked for (1)
#   --stock-total T       units preheated (+ restocked): Σ t must equal it
#   --expect-sold-out     every segment must be at 0
#   --status-url URL      GET this (…/api/v1/skus/S) and compare its totals with Redis (only
#                         sound when no hold can expire meanwhile: none live, SPEC §11); the
#                         exact read (?consistent=1 is added: SPEC §15), an admin request:
#   --status-token T      the admin token to send with it (else the instance must take admin
#                         calls from loopback, --admin-allow-loopback)
#   --key-schema 1        the keys of the binaries before 34f3be8 (inv:{S}:…, inv:{S:k}:…);
#                         default 2 (inv:2:{S}:…, inv:2:{S/k}:…, docs/design.md)
#   --pending-ok          follows queued and intents of multi-segment orders left are reported,
#                         not failures (by default, with nothing in flight, the sweepers must
#                         have drained them: the check after waiting for them)
#   --drain-s S           how long to wait for them to drain before reading (10)
#   --skip-users          leave out SPEC §11's per-user limit checks (chaos.py, which judges the
#                         limits against its history of rule changes)
#   --json FILE           also write inventory-check's JSON report to FILE
#   --group G             also SPEC §17's "no user over a group's limit" for limit group G
#                         across the SKUs --group-sku names (inventory-check --group)
#   --group-sku S         one SKU of the group (repeat it; --sku is always one of them)
#   --live                only the checks that hold at every instant, while orders run: one
#                         atomic MULTI/EXEC snapshot per segment (stock ≥ 0, t = stock + s,
#                         the counters against the segment's records)
# Quiescent checks (default; no request in flight): inventory-check --quiescent (every check
# docs/design.md "The invariant checker" lists: per segment from one MULTI/EXEC, the SKU's Σ,
# multi-segment orders whole, no stray key, the per-user limit; no follow or intent left,
# --pending-ok: counted only), and per SKU: Σ t = stock total; Σ s = units counted by wrk (and
# Σ o = 201 answers); with unanswered requests, counted ≤ Σ ≤ counted + unanswered × max-qty
# instead.
# Prints one line per check ("✓"/"✗") and a last line
#   VERIFY ok=1|0 segments=N stock_total=.. remaining=.. sold=.. orders=.. wrk_units=.. …
# Env: INVENTORY_CHECK (the inventory-check to run; else the first there of INVENTORY_BUILD_BIN's,
# BUILD_DIR/bin's and build/bin's of this tree: the tree's checker, whatever binary is under
# test, e.g. CH_KEY_SCHEMA=1 BUILD_DIR=build-old), PYTHON (/usr/bin/python3, reads the JSON).
# Exit: 0 every check passed, 1 an invariant is violated, 2 bad usage, 3 Redis could not be read.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
host=${LT_REDIS_HOST:-127.0.0.1}
port=${LT_REDIS_PORT:-}
cluster=""
sku=""
group="" group_skus=()
units="" orders="" unanswered=0 max_qty=1 stock_total="" expect_sold_out=0 status_url="" status_token="" live=0 schema=2 pending_ok=0 drain_s=10 skip_users=0 json_out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --redis-host) host=$2; shift 2 ;;
    --redis-port) port=$2; shift 2 ;;
    --redis-cluster) cluster=$2; shift 2 ;;
    --sku) sku=$2; shift 2 ;;
    --units) units=$2; shift 2 ;;
    --orders) orders=$2; shift 2 ;;
    --unanswered) unanswered=$2; shift 2 ;;
    --max-qty) max_qty=$2; shift 2 ;;
    --stock-total) stock_total=$2; shift 2 ;;
    --expect-sold-out) expect_sold_out=1; shift ;;
    --status-url) status_url=$2; shift 2 ;;
    --status-token) status_token=$2; shift 2 ;;
    --live) live=1; shift ;;
    --pending-ok) pending_ok=1; shift ;;
    --drain-s) drain_s=$2; shift 2 ;;
    --key-schema) schema=$2; shift 2 ;;
    --skip-users) skip_users=1; shift ;;
    --json) json_out=$2; shift 2 ;;
    --group) group=$2; shift 2 ;;
    --group-sku) group_skus+=(--sku "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$port$cluster" ] && [ -n "$sku" ] || { echo "verify.sh: --redis-port (or --redis-cluster) and --sku are required" >&2; exit 2; }
[[ $drain_s =~ ^[0-9]+$ ]] || { echo "verify.sh: --drain-s takes whole seconds" >&2; exit 2; }
case "$schema" in
  1|2) ;;
  *) echo "verify.sh: --key-schema is 1 or 2" >&2; exit 2 ;;
esac
check=${INVENTORY_CHECK:-}
if [ -z "$check" ]; then
  for c in ${INVENTORY_BUILD_BIN:+"$INVENTORY_BUILD_BIN/inventory-check"} ${BUILD_DIR:+"$BUILD_DIR/bin/inventory-check"} "$root/build/bin/inventory-check"; do
    [ -x "$c" ] && { check=$c; break; }
  done
fi
[ -n "$check" ] && [ -x "$check" ] || { echo "verify.sh: no inventory-check (cmake --build build --target inventory-check, or INVENTORY_CHECK=<path>)" >&2; exit 3; }

if [ -n "$cluster" ]; then url=$cluster where=$cluster; else url="redis://$host:$port" where=$host:$port; fi
args=(--redis "$url" --sku "$sku" --key-schema "$schema")
[ "$live" = 1 ] && args+=(--live)
[ "$live" = 0 ] && [ "$pending_ok" = 0 ] && args+=(--quiescent --drain-s "$drain_s")
[ "$skip_users" = 1 ] && args+=(--skip-users)
crc=0
report=$("$check" "${args[@]}" 2>/dev/null) || crc=$?
[ -z "$json_out" ] || printf '%s\n' "$report" >"$json_out"
case $crc in
  0|1) ;;
  3) echo "verify: cannot read Redis at $where" >&2; exit 3 ;;
  *) echo "verify: inventory-check failed (exit $crc)" >&2; exit 3 ;;
esac
# The report as shell lines: NAME=value for the totals, "seg <stock>" per segment, "P <check>
# <text>" per problem (the first 64; "more <n>" for the rest).
flat=$("${PYTHON:-/usr/bin/python3}" -c '
import json, sys
r = json.load(sys.stdin)
for k in ("ok", "found", "version", "segments", "stock_total", "remaining", "sold", "orders",
          "records", "cancelled", "expired", "reserved", "locks_held", "multi_orders", "live_parts",
          "follows", "intents"):
    print("%s=%d" % (k, int(r.get(k) or 0)))
for s in r.get("segment", []):
    print("seg %d" % s["stock"])
for p in r.get("problems", []):
    print("P %s %s" % (p["check"], " ".join(p["text"].split())))
if r.get("nproblems", 0) > len(r.get("problems", [])):
    print("more %d" % (r["nproblems"] - len(r["problems"])))
' <<<"$report") || { echo "verify: unreadable report from inventory-check: ${report:0:200}" >&2; exit 3; }
val() { sed -n "s/^$1=//p" <<<"$flat"; }
failures=0
pass() { echo "verify: ✓ $*"; }
fail() { echo "verify: ✗ $*"; failures=$((failures + 1)); }
while IFS= read -r p; do fail "${p#P * }"; done < <(grep '^P ' <<<"$flat" || true)
if [ -n "$group" ] && [ "$live" = 0 ]; then
  # SPEC §17: no user over the group's limit in the live orders of its SKUs (ic_check_group)
  grc=0
  greport=$("$check" --redis "$url" --group "$group" --sku "$sku" "${group_skus[@]}" 2>/dev/null) || grc=$?
  case $grc in
    0) pass "group $group: no user over its limit ($(grep -o '"max_user_units":[0-9]*' <<<"$greport" | cut -d: -f2) units at most)" ;;
    1) fail "group $group: $(grep -o '"text":"[^"]*"' <<<"$greport" | head -3 | tr '\n' ' ')" ;;
    *) echo "verify: cannot check group $group at $where (exit $grc)" >&2; exit 3 ;;
  esac
fi
more=$(sed -n 's/^more //p' <<<"$flat")
[ -z "$more" ] || fail "… and $more more problem(s) (inventory-check --sku $sku --redis $url)"
version=$(val version) nseg=$(val segments)
if [ "$(val found)" != 1 ]; then
  echo "VERIFY ok=0 sku=$sku reason=no-meta"
  exit 1
fi
mapfile -t seg_stock < <(sed -n 's/^seg //p' <<<"$flat")

if [ "$live" = 1 ]; then
  [ "$failures" = 0 ] && pass "live snapshot of $nseg segments: stock ≥ 0, t = stock + s, the counters = the records"
  echo "VERIFY ok=$([ "$failures" = 0 ] && echo 1 || echo 0) live=1 segments=$nseg"
  [ "$failures" = 0 ] || exit 1
  exit 0
fi

sum_t=$(val stock_total) sum_stock=$(val remaining) sum_s=$(val sold) sum_o=$(val orders)
sum_r=$(val reserved) sum_rec=$(val records) sum_canc=$(($(val cancelled) + $(val expired))) locks=$(val locks_held)
n_multi=$(val multi_orders) n_lparts=$(val live_parts) n_follows=$(val follows) n_intents=$(val intents)
[ "$(val ok)" = 1 ] && pass "$nseg segments (version $version), inventory-check: stock ≥ 0, t = stock + s, o = live orders, s = Σ their units, r = Σ those of holds, due set = the holds; sold $sum_s = stock_total $sum_t − remaining $sum_stock; $n_multi multi-segment order(s) and cart(s) whole (a cart's parts in other SKUs too); $n_follows follow(s) queued, $n_intents intent(s)"
if [ "$expect_sold_out" = 1 ]; then
  for ((k = 0; k < ${#seg_stock[@]}; k++)); do
    [ "${seg_stock[k]}" -eq 0 ] || fail "segment $k: ${seg_stock[k]} units left, expected sold out"
  done
fi
if [ -n "$stock_total" ]; then
  [ "$sum_t" -eq "$stock_total" ] && pass "Σ t = $sum_t = the preheated stock" \
    || fail "Σ t = $sum_t != the preheated stock $stock_total"
fi
if [ -n "$units" ]; then
  if [ "$unanswered" -eq 0 ]; then
    [ "$sum_s" -eq "$units" ] && pass "units sold in Redis $sum_s = units in 201 answers counted by wrk $units" \
      || fail "units sold in Redis $sum_s != units in 201 answers counted by wrk $units"
  else
    hi=$((units + unanswered * max_qty))
    if [ "$sum_s" -ge "$units" ] && [ "$sum_s" -le "$hi" ]; then
      pass "units in 201 answers $units ≤ sold $sum_s ≤ $hi ($unanswered request(s) unanswered when wrk stopped)"
    else
      fail "sold $sum_s outside [$units, $hi]: units in 201 answers $units, $unanswered unanswered"
    fi
  fi
fi
if [ -n "$orders" ]; then
  sum_ord=$sum_o # cnt.o counts orders, never parts
  if [ "$unanswered" -eq 0 ]; then
    [ "$sum_ord" -eq "$orders" ] && pass "live orders in Redis $sum_ord = 201 answers $orders" \
      || fail "live orders in Redis $sum_ord != 201 answers counted by wrk $orders"
  else
    [ "$sum_ord" -ge "$orders" ] && [ "$sum_ord" -le $((orders + unanswered)) ] \
      && pass "201 answers $orders ≤ live orders $sum_ord ≤ $((orders + unanswered))" \
      || fail "live orders $sum_ord outside [$orders, $((orders + unanswered))]"
  fi
fi
if [ "$locks" -gt 0 ]; then
  echo "verify: ! $locks segment lock(s) still held with no request in flight (leases expire; not a SPEC §8 violation)"
fi
if [ -n "$status_url" ]; then
  # The SKU-wide totals; the per-segment array (same field names) is cut off first. The exact
  # read (?consistent=1, SPEC §15: the plain GET is a snapshot up to --status-refresh-ms old).
  case $status_url in
    *consistent=1*) exact_url=$status_url ;;
    *\?*) exact_url="$status_url&consistent=1" ;;
    *) exact_url="$status_url?consistent=1" ;;
  esac
  auth=()
  [ -z "$status_token" ] || auth=(-H "Authorization: Bearer $status_token")
  body=$(curl -fsS --max-time 5 "${auth[@]}" "$exact_url" 2>/dev/null | sed 's/"segments":\[[^]]*\]//') || body=""
  num() { grep -o "\"$1\":[0-9]*" <<<"$body" | head -1 | cut -d: -f2; }
  if [ -z "$body" ]; then
    fail "status endpoint $status_url did not answer"
  else
    a_total=$(num stock_total) a_rem=$(num remaining) a_sold=$(num sold) a_orders=$(num orders)
    a_res=$(num reserved)   # SPEC §11 (absent before it)
    if [ "$a_total" = "$sum_t" ] && [ "$a_rem" = "$sum_stock" ] && [ "$a_sold" = "$sum_s" ] && [ "$a_orders" = "$sum_o" ] \
       && { [ -z "$a_res" ] || [ "$a_res" = "$sum_r" ]; }; then
      pass "status endpoint agrees (stock_total $a_total, remaining $a_rem, sold $a_sold, orders $a_orders${a_res:+, reserved $a_res})"
    else
      fail "status endpoint says stock_total=$a_total remaining=$a_rem sold=$a_sold orders=$a_orders${a_res:+ reserved=$a_res}; Redis: $sum_t $sum_stock $sum_s $sum_o${a_res:+ $sum_r}"
    fi
  fi
fi
ok=$([ "$failures" = 0 ] && echo 1 || echo 0)
echo "VERIFY ok=$ok segments=$nseg version=$version stock_total=$sum_t remaining=$sum_stock sold=$sum_s orders=$sum_o records=$sum_rec ended=$sum_canc reserved=$sum_r wrk_units=${units:-na} wrk_orders=${orders:-na} unanswered=$unanswered locks_held=$locks multi_orders=${n_multi:-0} live_parts=${n_lparts:-0} follows=${n_follows:-0} intents=${n_intents:-0}"
[ "$ok" = 1 ] || exit 1
