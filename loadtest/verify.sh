#!/usr/bin/env bash
# Checks the SPEC §8 invariants of one SKU from Redis directly (redis-cli and the key schema of
# docs/design.md), against the load generator's own count of 201 answers, and optionally
# against the service's status endpoint. Independent of the service's code: it reads the keys,
# parses the order records with awk and adds up.
#
# Usage: loadtest/verify.sh --redis-port P --sku S [options]
#        loadtest/verify.sh --redis-cluster URL --sku S [options]
#   --redis-host H        Redis host (127.0.0.1)
#   --redis-cluster URL   a Redis Cluster instead (redis-cluster://host:port[,…], any of its
#                         nodes): every command goes to the master of its key's slot, the slot
#                         map asked for again after a failover (loadtest/resp.py, the routing
#                         loadtest/chaos.py uses too); PYTHON (/usr/bin/python3) runs it
#   --units U             units in 201 answers counted by wrk (order.lua's `units`)
#   --orders N            number of 201 answers counted by wrk (`created`)
#   --unanswered X        requests wrk sent without getting an answer (0: exact comparison)
#   --max-qty Q           largest quantity one of those requests asked for (1)
#   --stock-total T       units preheated (+ restocked): Σ t must equal it
#   --expect-sold-out     every segment must be at 0
#   --status-url URL      GET this (…/api/v1/skus/S) and compare its totals with Redis (only
#                         sound when no hold can expire meanwhile: none live, SPEC §11)
#   --key-schema 1        the keys of the binaries before 34f3be8 (inv:{S}:…, inv:{S:k}:…);
#                         default 2 (inv:2:{S}:…, inv:2:{S/k}:…, docs/design.md)
#   --live                only the checks that hold at every instant, while orders run: one
#                         atomic MULTI/EXEC snapshot per segment (stock ≥ 0, t = stock + s,
#                         o = records in :orders — this last one assumes no cancellations,
#                         which the load test never makes)
# Quiescent checks (default; no request in flight), per segment k of the current version, from
# one MULTI/EXEC of the segment (the expiry sweep of holds runs without requests):
#   stock ≥ 0; sver = meta.version; t = stock + s; o = live records (created, reserved,
#   confirmed; ended: cancelled, expired) in inv:2:{S/k}:orders; s = Σ quantity of those
#   records; r = Σ quantity of the reserved ones (holds); every record names this SKU and
#   segment k.
# and per SKU: Σ t = stock total; Σ s = units counted by wrk (and Σ o = 201 answers); with
# unanswered requests, counted ≤ Σ ≤ counted + unanswered × max-qty instead.
# Prints one line per check ("✓"/"✗") and a last line
#   VERIFY ok=1|0 segments=N stock_total=.. remaining=.. sold=.. orders=.. wrk_units=.. …
# Exit: 0 every check passed, 1 an invariant is violated, 3 Redis could not be read.
set -euo pipefail

host=${LT_REDIS_HOST:-127.0.0.1}
port=${LT_REDIS_PORT:-}
cluster=""
sku=""
units="" orders="" unanswered=0 max_qty=1 stock_total="" expect_sold_out=0 status_url="" live=0 schema=2
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
    --live) live=1; shift ;;
    --key-schema) schema=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$port$cluster" ] && [ -n "$sku" ] || { echo "verify.sh: --redis-port (or --redis-cluster) and --sku are required" >&2; exit 2; }
# The key schema: kp the prefix, sp a segment's key prefix as a printf format (SKU, index).
case "$schema" in
  2) kp='inv:2:' sp='inv:2:{%s/%d}' ;;
  1) kp='inv:' sp='inv:{%s:%d}' ;;
  *) echo "verify.sh: --key-schema is 1 or 2" >&2; exit 2 ;;
esac

if [ -n "$cluster" ]; then
  # Commands as arguments or one a line on stdin, like redis-cli; replies as redis-cli --raw.
  resp=("${PYTHON:-/usr/bin/python3}" "$(dirname "$0")/resp.py" --cluster "$cluster")
  rcli() { if [ $# -gt 0 ]; then printf '%s\n' "$*" | "${resp[@]}"; else "${resp[@]}"; fi; }
  where=$cluster
else
  rcli() { redis-cli -h "$host" -p "$port" --raw "$@"; }
  where=$host:$port
fi
failures=0
pass() { echo "verify: ✓ $*"; }
fail() { echo "verify: ✗ $*"; failures=$((failures + 1)); }
is_int() { [[ $1 =~ ^-?[0-9]+$ ]]; }

meta=$(rcli HMGET "${kp}{$sku}:meta" version segments state) || { echo "verify: cannot read Redis at $where" >&2; exit 3; }
version=$(sed -n 1p <<<"$meta")
nseg=$(sed -n 2p <<<"$meta")
state=$(sed -n 3p <<<"$meta")
if ! is_int "$version" || ! is_int "$nseg" || [ "$nseg" -lt 1 ]; then
  echo "verify: ✗ ${kp}{$sku}:meta is missing or malformed (version='$version' segments='$nseg')"
  echo "VERIFY ok=0 sku=$sku reason=no-meta"
  exit 1
fi

if [ "$live" = 0 ] && [ "$state" = p ]; then
  # A PUT's layout not yet on every segment: whoever next meets the SKU completes it, and with
  # no request in flight someone must have (the status read, the next order).
  fail "meta state p: version $version not rolled out to every segment"
fi

if [ "$live" = 1 ]; then
  # One MULTI/EXEC per segment: an atomic snapshot of that segment while orders run.
  out=$(for ((k = 0; k < nseg; k++)); do
          # shellcheck disable=SC2059  # the format holds the key schema's segment prefix
          printf "MULTI\nGET ${sp}:stock\nHMGET ${sp}:cnt t s o\nHLEN ${sp}:orders\nEXEC\n" \
            "$sku" "$k" "$sku" "$k" "$sku" "$k"
        done | rcli | grep -v -e '^OK$' -e '^QUEUED$') || { echo "verify: cannot read Redis" >&2; exit 3; }
  mapfile -t v <<<"$out"
  bad=0
  for ((k = 0; k < nseg; k++)); do
    st=${v[k * 5]:-} t=${v[k * 5 + 1]:-} s=${v[k * 5 + 2]:-} o=${v[k * 5 + 3]:-} hl=${v[k * 5 + 4]:-}
    if ! is_int "$st" || ! is_int "$t" || ! is_int "$s" || ! is_int "$o" || ! is_int "$hl"; then
      fail "live segment $k: unreadable snapshot (stock='$st' t='$t' s='$s' o='$o' records='$hl')"; bad=1; continue
    fi
    [ "$st" -ge 0 ] || { fail "live segment $k: stock $st < 0"; bad=1; }
    [ "$t" -eq $((st + s)) ] || { fail "live segment $k: t=$t != stock $st + s $s"; bad=1; }
    [ "$o" -eq "$hl" ] || { fail "live segment $k: o=$o != $hl order records"; bad=1; }
  done
  [ "$bad" = 0 ] && pass "live snapshot of $nseg segments: stock ≥ 0, t = stock + s, o = records"
  echo "VERIFY ok=$([ "$failures" = 0 ] && echo 1 || echo 0) live=1 segments=$nseg"
  [ "$failures" = 0 ] || exit 1
  exit 0
fi

# Each segment in one MULTI/EXEC (an atomic snapshot: the expiry sweep of holds may run while
# we read, SPEC §11), all of them in one pipelined redis-cli call; awk parses the order records
# and prints one line per segment:
#   "k stock sver t s o r lock hlen records live live_units ended reserved_units malformed".
# The scalars are positional (a missing key reads as an empty line), the records follow.
agg=$(for ((k = 0; k < nseg; k++)); do
        # shellcheck disable=SC2059  # the format holds the key schema's segment prefix
        printf "ECHO @@seg:%d\nMULTI\nGET ${sp}:stock\nGET ${sp}:sver\nHMGET ${sp}:cnt t s o r\nEXISTS ${sp}:lock\nHLEN ${sp}:orders\nZCARD ${sp}:due\nHVALS ${sp}:orders\nEXEC\n" \
          "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k"
      done | rcli | awk -v sku="$sku" '
  function nz(x) { return x == "" ? "-" : x }
  function flush() {
    if (seg != "") print seg, nz(sc[1]), nz(sc[2]), nz(sc[3]), nz(sc[4]), nz(sc[5]), (sc[6] == "" ? 0 : sc[6]), nz(sc[7]), nz(sc[8]), n, live, units, ended, held, bad, (sc[9] == "" ? 0 : sc[9]), nres
  }
  /^@@seg:/ { flush(); seg = substr($0, 7); line = 0; n = live = units = ended = held = bad = nres = 0; split("", sc); next }
  {
    line++
    if (line <= 8) next                       # OK, then QUEUED for each of the 7 commands
    if (line <= 17) { sc[line - 8] = $0; next }
    if ($0 == "") next
    n++
    q = ""; st = ""; sk = ""; sg = ""
    if (match($0, /"quantity":[0-9]+/)) q = substr($0, RSTART + 11, RLENGTH - 11)
    if (match($0, /"status":"[a-z]+"/)) st = substr($0, RSTART + 10, RLENGTH - 11)
    if (match($0, /"sku":"[^"]*"/)) sk = substr($0, RSTART + 7, RLENGTH - 8)
    if (match($0, /"segment":[0-9]+/)) sg = substr($0, RSTART + 10, RLENGTH - 10)
    if (q == "" || sk != sku || sg != seg) { bad++; next }
    if (st == "created" || st == "reserved" || st == "confirmed") { live++; units += q; if (st == "reserved") { held += q; nres++ } }
    else if (st == "cancelled" || st == "expired") ended++
    else bad++
  }
  END { flush() }') || { echo "verify: cannot read Redis" >&2; exit 3; }

sum_t=0 sum_stock=0 sum_s=0 sum_o=0 sum_r=0 sum_rec=0 sum_canc=0 locks=0 seg_bad=0
for ((k = 0; k < nseg; k++)); do
  read -r ak st ver t s o r lk hl n live lunits canc held bad due nres < <(awk -v k="$k" '$1 == k' <<<"$agg") || true
  [ "${ak:-}" = "$k" ] || { fail "segment $k: unreadable"; seg_bad=1; continue; }
  if ! is_int "$st" || ! is_int "$t" || ! is_int "$s" || ! is_int "$o" || ! is_int "$hl"; then
    fail "segment $k: missing keys (stock='$st' t='$t' s='$s' o='$o')"; seg_bad=1; continue
  fi
  [ "$ver" = "$version" ] || { fail "segment $k: sver '$ver' != meta version $version"; seg_bad=1; }
  [ "$st" -ge 0 ] || { fail "segment $k: stock $st < 0 (oversold)"; seg_bad=1; }
  [ "$t" -eq $((st + s)) ] || { fail "segment $k: t=$t != stock $st + s $s (stock taken without its order, or the reverse)"; seg_bad=1; }
  [ "$n" -eq "$hl" ] || { fail "segment $k: read $n records, HLEN says $hl"; seg_bad=1; }
  [ "$bad" -eq 0 ] || { fail "segment $k: $bad malformed record(s) (no quantity, wrong sku/segment or status)"; seg_bad=1; }
  [ "$o" -eq "$live" ] || { fail "segment $k: cnt.o=$o != $live live order records"; seg_bad=1; }
  [ "$s" -eq "$lunits" ] || { fail "segment $k: cnt.s=$s != $lunits units in live order records"; seg_bad=1; }
  [ "$r" = - ] && r=0
  if ! is_int "$r" || [ "$r" -ne "$held" ]; then fail "segment $k: cnt.r=$r != $held units in reserved (held) order records"; seg_bad=1; fi
  [ "${due:-0}" = "${nres:-0}" ] || { fail "segment $k: $due members in the due set != ${nres:-0} reserved records (a hold that would never expire, or a ghost)"; seg_bad=1; }
  [ "$expect_sold_out" = 0 ] || [ "$st" -eq 0 ] || { fail "segment $k: $st units left, expected sold out"; seg_bad=1; }
  sum_t=$((sum_t + t)) sum_stock=$((sum_stock + st)) sum_s=$((sum_s + s)) sum_o=$((sum_o + o))
  sum_r=$((sum_r + held)) sum_rec=$((sum_rec + n)) sum_canc=$((sum_canc + canc)) locks=$((locks + lk))
done
[ "$seg_bad" = 0 ] && pass "$nseg segments (version $version): stock ≥ 0, t = stock + s, o = live records, s = Σ their quantities, r = Σ those of holds, due set = the holds"
[ $((sum_t - sum_stock)) -eq "$sum_s" ] && pass "sold $sum_s = stock_total $sum_t − remaining $sum_stock" \
  || fail "sold $sum_s != stock_total $sum_t − remaining $sum_stock"
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
  if [ "$unanswered" -eq 0 ]; then
    [ "$sum_o" -eq "$orders" ] && pass "live orders in Redis $sum_o = 201 answers $orders" \
      || fail "live orders in Redis $sum_o != 201 answers counted by wrk $orders"
  else
    [ "$sum_o" -ge "$orders" ] && [ "$sum_o" -le $((orders + unanswered)) ] \
      && pass "201 answers $orders ≤ live orders $sum_o ≤ $((orders + unanswered))" \
      || fail "live orders $sum_o outside [$orders, $((orders + unanswered))]"
  fi
fi
if [ "$locks" -gt 0 ]; then
  echo "verify: ! $locks segment lock(s) still held with no request in flight (leases expire; not a SPEC §8 violation)"
fi
if [ -n "$status_url" ]; then
  # The SKU-wide totals; the per-segment array (same field names) is cut off first.
  body=$(curl -fsS --max-time 5 "$status_url" 2>/dev/null | sed 's/"segments":\[[^]]*\]//') || body=""
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
echo "VERIFY ok=$ok segments=$nseg version=$version stock_total=$sum_t remaining=$sum_stock sold=$sum_s orders=$sum_o records=$sum_rec ended=$sum_canc reserved=$sum_r wrk_units=${units:-na} wrk_orders=${orders:-na} unanswered=$unanswered locks_held=$locks"
[ "$ok" = 1 ] || exit 1
