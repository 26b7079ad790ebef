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
#   --live                only the checks that hold at every instant, while orders run: one
#                         atomic MULTI/EXEC snapshot per segment (stock ≥ 0, t = stock + s,
#                         o = records in :orders — this last one assumes no cancellations,
#                         which the load test never makes)
# Quiescent checks (default; no request in flight), per segment k of the current version, from
# one MULTI/EXEC of the segment (the expiry sweep of holds runs without requests):
#   stock ≥ 0; sver = meta.version; t = stock + s; o = live records (created, reserved,
#   confirmed; ended: cancelled, expired) in inv:2:{S/k}:orders; s = Σ quantity of those
#   records; r = Σ quantity of the reserved ones (holds); every record names this SKU and
#   segment k; a multi-segment order's primary counts its own part's units, its part records
#   (part_of) theirs, and it is whole: every part there with the quantity its primary lists and
#   the primary's status (created/reserved alike; a part may lag under a queued follow), no
#   part without its primary (unless its intent is left); no follow or intent left
#   (--pending-ok: counted only).
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
units="" orders="" unanswered=0 max_qty=1 stock_total="" expect_sold_out=0 status_url="" status_token="" live=0 schema=2 pending_ok=0 drain_s=10
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
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$port$cluster" ] && [ -n "$sku" ] || { echo "verify.sh: --redis-port (or --redis-cluster) and --sku are required" >&2; exit 2; }
[[ $drain_s =~ ^[0-9]+$ ]] || { echo "verify.sh: --drain-s takes whole seconds" >&2; exit 2; }
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

# The follows of multi-segment orders and the intents of cut-off ones are drained by the
# sweepers (an intent D + 1 s after its deadline): with nothing in flight, wait for them
# (at most --drain-s) before reading, so that the check below may require none left.
if [ "$live" = 0 ] && [ "$pending_ok" = 0 ] && [ "$schema" = 2 ]; then
  drain_end=$((SECONDS + drain_s))
  while :; do
    # shellcheck disable=SC2059
    left=$({ printf "HLEN ${kp}{%s}:multi\n" "$sku"
             for ((k = 0; k < nseg; k++)); do printf "ZCARD ${sp}:follow\n" "$sku" "$k"; done; } |
           rcli | awk '{ n += $1 } END { print n + 0 }') || left=0
    [ "$left" = 0 ] || [ "$SECONDS" -ge "$drain_end" ] && break
    sleep 0.2
  done
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
# we read, SPEC §11), all of them in one pipelined redis-cli call, after the SKU's intents of
# multi-segment orders (inv:2:{S}:multi); awk parses the order records and prints one line per
# segment:
#   "k stock sver t s o r lock hlen records live live_units ended reserved_units malformed due
#    reserved_records follows"
# The scalars are positional (a missing key reads as an empty line), then the segment's follow
# queue and its records, each after an ECHOed marker. A multi-segment order (docs/design.md
# "Orders larger than one segment") is its primary record (quantity = the order's total, its
# "parts" [{"segment":k,"quantity":q},…]; its units in its segment are its own part's) and a
# part record (part_of) in each other segment; awk checks them across segments at its end and
# prints "@M multi_orders live_parts follows intents", "@P <problem>" and, for what a sweep
# running while we read can explain, "@A <primary> <k1> <part class> <part>" (a part ended,
# its primary read live) and "@O <part> <k> <primary> <k1> <hex>" (a part without primary or
# intent), judged again below on the current records.
agg=$({ printf "ECHO @@multi\nHKEYS ${kp}{%s}:multi\n" "$sku"
        for ((k = 0; k < nseg; k++)); do
          # shellcheck disable=SC2059  # the format holds the key schema's segment prefix
          printf "ECHO @@seg:%d\nMULTI\nGET ${sp}:stock\nGET ${sp}:sver\nHMGET ${sp}:cnt t s o r\nEXISTS ${sp}:lock\nHLEN ${sp}:orders\nZCARD ${sp}:due\nECHO @@follow\nZRANGE ${sp}:follow 0 -1\nECHO @@records\nHVALS ${sp}:orders\nEXEC\n" \
            "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k" "$sku" "$k"
        done; } | rcli | awk -v sku="$sku" '
  function nz(x) { return x == "" ? "-" : x }
  function cls(st) { return st == "reserved" ? "created" : st }
  function flush() {
    if (seg != "") print seg, nz(sc[1]), nz(sc[2]), nz(sc[3]), nz(sc[4]), nz(sc[5]), (sc[6] == "" ? 0 : sc[6]), nz(sc[7]), nz(sc[8]), n, live, units, ended, held, bad, (sc[9] == "" ? 0 : sc[9]), nres, nfol
  }
  /^@@multi$/ { mode = "multi"; next }
  /^@@seg:/ { flush(); seg = substr($0, 7); mode = "seg"; line = 0; n = live = units = ended = held = bad = nres = nfol = 0; split("", sc); next }
  mode == "multi" { if ($0 != "") { intent[$0] = 1; nint++ }; next }
  {
    line++
    if (line <= 11) next                      # OK, then QUEUED for each of the 10 commands
    if (line <= 20) { sc[line - 11] = $0; next }
    if ($0 == "@@follow") { mode = "follow"; next }
    if ($0 == "@@records") { mode = "records"; next }
    if ($0 == "") next
    if (mode == "follow") { follow[seg SUBSEP $0] = 1; nfol++; nfollows++; next }
    n++
    q = ""; st = ""; sk = ""; sg = ""; oid = ""; po = ""; pa = ""; rest = $0
    if (match(rest, /"parts":\[[^]]*\]/)) { pa = substr(rest, RSTART + 9, RLENGTH - 10); rest = substr(rest, 1, RSTART - 1) substr(rest, RSTART + RLENGTH) }
    if (match(rest, /"part_of":"[^"]*"/)) { po = substr(rest, RSTART + 11, RLENGTH - 12); rest = substr(rest, 1, RSTART - 1) substr(rest, RSTART + RLENGTH) }
    if (match(rest, /"quantity":[0-9]+(\.0)?/)) { q = substr(rest, RSTART + 11, RLENGTH - 11); sub(/\.0$/, "", q) }
    if (match(rest, /"status":"[a-z]+"/)) st = substr(rest, RSTART + 10, RLENGTH - 11)
    if (match(rest, /"sku":"[^"]*"/)) sk = substr(rest, RSTART + 7, RLENGTH - 8)
    if (match(rest, /"segment":[0-9]+(\.0)?/)) { sg = substr(rest, RSTART + 10, RLENGTH - 10); sub(/\.0$/, "", sg) }
    if (match(rest, /"order_id":"[^"]*"/)) oid = substr(rest, RSTART + 12, RLENGTH - 13)
    if (q == "" || sk != sku || sg != seg) { bad++; next }
    u = q
    if (pa != "") {                           # a primary: its parts, its own segment first
      np = split(pa, ps, /\},\{/); sum = 0; own = ""; list = ""; prev = -1
      for (i = 1; i <= np; i++) {
        pk = ""; pq = ""
        if (match(ps[i], /"segment":[0-9]+/)) pk = substr(ps[i], RSTART + 10, RLENGTH - 10)
        if (match(ps[i], /"quantity":[0-9]+/)) pq = substr(ps[i], RSTART + 11, RLENGTH - 11)
        if (pk == "" || pq == "" || pq + 0 < 1 || pk + 0 <= prev) { own = ""; sum = -1; break }
        prev = pk + 0; sum += pq; list = list (i > 1 ? "," : "") pk ":" pq
        if (pk == seg) own = pq
      }
      if (own == "" || sum != q + 0 || np < 2 || substr(list, 1, length(seg) + 1) != seg ":") {
        print "@P segment " seg ": order " oid ": parts " list " do not start at its segment and sum to its quantity " q; own = 0
      }
      u = own; P[oid] = seg; PS[oid] = st; PL[oid] = list; nmulti++
    } else if (po != "") {                    # a part: no user, no hold entry of its own
      R[oid] = po; RK[oid] = seg; RQ[oid] = q; RST[oid] = st
    }
    if (st == "created" || st == "reserved" || st == "confirmed") {
      if (po == "") live++   # cnt.o counts orders: a part is none
      units += u
      if (st == "reserved") { held += u; if (po == "") nres++ }
      if (po != "") nlparts++
    }
    else if (st == "cancelled" || st == "expired") ended++
    else bad++
  }
  END {
    flush()
    for (id in R) {                           # every part: its primary lists it
      po = R[id]; hex = substr(id, 1, index(id, "-") - 1); k1 = po; sub(/^[^-]*-/, "", k1); sub(/-.*$/, "", k1)
      if (!(po in P)) {
        if (!(hex in intent)) print "@O " id " " RK[id] " " po " " k1 " " hex
        continue
      }
      if (index("," PL[po] ",", "," RK[id] ":" RQ[id] ",") == 0)
        print "@P part " id " of " RQ[id] " units in segment " RK[id] ": its primary " po " lists " PL[po]
    }
    for (id in P) {                           # every primary: each part there, status agreeing
      hex = substr(id, 1, index(id, "-") - 1); np = split(PL[id], ps, ",")
      for (i = 1; i <= np; i++) {
        split(ps[i], kq, ":"); if (kq[1] == P[id]) continue
        pid = hex "-" kq[1] "-" sku
        if (!(pid in R) || R[pid] != id) { print "@P order " id ": its part " pid " (" kq[2] " units) is missing: half an order"; continue }
        if (RQ[pid] != kq[2]) print "@P order " id ": part " pid " holds " RQ[pid] " units, the order says " kq[2]
        if (cls(RST[pid]) != cls(PS[id]) && !((P[id] SUBSEP pid "|" PS[id]) in follow)) {
          if (cls(PS[id]) == "created") print "@A " id " " P[id] " " cls(RST[pid]) " " pid
          else print "@P order " id " is " PS[id] ", its part " pid " is " RST[pid] " (and no follow queued)"
        }
      }
    }
    print "@M", nmulti + 0, nlparts + 0, nfollows + 0, nint + 0
  }') || { echo "verify: cannot read Redis" >&2; exit 3; }

# The multi-segment orders (SPEC §8 "every part is sold or none is").
read -r _ n_multi n_lparts n_follows n_intents < <(grep '^@M ' <<<"$agg") || true
multi_bad=0
while IFS= read -r p; do fail "${p#@P }"; multi_bad=1; done < <(grep '^@P ' <<<"$agg" || true)
# A part seen ended with its primary read live (the sweep ended both between the two reads)
# is fine when the primary, read now, has ended the same way.
while read -r _ pid k1 pcls part; do
  # shellcheck disable=SC2059
  now=$(rcli HGET "$(printf "${sp}" "$sku" "$k1"):orders" "$pid" | grep -o '"status":"[a-z]*"' | cut -d'"' -f4)
  [ "$now" = reserved ] && now=created
  [ "$now" = "$pcls" ] || { fail "order $pid is ${now:-gone}, its part $part is $pcls (and no follow queued)"; multi_bad=1; }
done < <(grep '^@A ' <<<"$agg" || true)
# A part without its primary or an intent: an order made or rolled back while we read leaves
# the part gone, the primary or an intent there now.
while read -r _ part k pid k1 hex; do
  # shellcheck disable=SC2059
  still=$(printf "HEXISTS ${sp}:orders %s\nHEXISTS ${sp}:orders %s\nHEXISTS ${kp}{%s}:multi %s\n" \
            "$sku" "$k" "$part" "$sku" "$k1" "$pid" "$sku" "$hex" | rcli | tr '\n' ' ')
  [ "$still" != "1 0 0 " ] || { fail "part $part (segment $k): its primary $pid is not in segment $k1 and no intent for $hex is left: half an order"; multi_bad=1; }
done < <(grep '^@O ' <<<"$agg" || true)
if [ "$pending_ok" = 0 ] && { [ "${n_follows:-0}" -gt 0 ] || [ "${n_intents:-0}" -gt 0 ]; }; then
  fail "not quiescent: ${n_follows:-0} follow(s) queued, ${n_intents:-0} intent(s) of multi-segment orders left (--pending-ok: allowed)"; multi_bad=1
fi
[ "$multi_bad" = 0 ] && pass "${n_multi:-0} multi-segment order(s): each whole (every part there, listed with its quantity, its status the primary's); ${n_follows:-0} follow(s) queued, ${n_intents:-0} intent(s)"

sum_t=0 sum_stock=0 sum_s=0 sum_o=0 sum_r=0 sum_rec=0 sum_canc=0 locks=0 seg_bad=0
for ((k = 0; k < nseg; k++)); do
  read -r ak st ver t s o r lk hl n live lunits canc held bad due nres _ < <(awk -v k="$k" '$1 == k' <<<"$agg") || true
  [ "${ak:-}" = "$k" ] || { fail "segment $k: unreadable"; seg_bad=1; continue; }
  if ! is_int "$st" || ! is_int "$t" || ! is_int "$s" || ! is_int "$o" || ! is_int "$hl"; then
    fail "segment $k: missing keys (stock='$st' t='$t' s='$s' o='$o')"; seg_bad=1; continue
  fi
  [ "$ver" = "$version" ] || { fail "segment $k: sver '$ver' != meta version $version"; seg_bad=1; }
  [ "$st" -ge 0 ] || { fail "segment $k: stock $st < 0 (oversold)"; seg_bad=1; }
  [ "$t" -eq $((st + s)) ] || { fail "segment $k: t=$t != stock $st + s $s (stock taken without its order, or the reverse)"; seg_bad=1; }
  [ "$n" -eq "$hl" ] || { fail "segment $k: read $n records, HLEN says $hl"; seg_bad=1; }
  [ "$bad" -eq 0 ] || { fail "segment $k: $bad malformed record(s) (no quantity, wrong sku/segment or status)"; seg_bad=1; }
  [ "$o" -eq "$live" ] || { fail "segment $k: cnt.o=$o != $live live orders (records that are not parts)"; seg_bad=1; }
  [ "$s" -eq "$lunits" ] || { fail "segment $k: cnt.s=$s != $lunits units in live order records"; seg_bad=1; }
  [ "$r" = - ] && r=0
  if ! is_int "$r" || [ "$r" -ne "$held" ]; then fail "segment $k: cnt.r=$r != $held units in reserved (held) order records"; seg_bad=1; fi
  [ "${due:-0}" = "${nres:-0}" ] || { fail "segment $k: $due members in the due set != ${nres:-0} reserved records (a hold that would never expire, or a ghost)"; seg_bad=1; }
  [ "$expect_sold_out" = 0 ] || [ "$st" -eq 0 ] || { fail "segment $k: $st units left, expected sold out"; seg_bad=1; }
  sum_t=$((sum_t + t)) sum_stock=$((sum_stock + st)) sum_s=$((sum_s + s)) sum_o=$((sum_o + o))
  sum_r=$((sum_r + held)) sum_rec=$((sum_rec + n)) sum_canc=$((sum_canc + canc)) locks=$((locks + lk))
done
[ "$seg_bad" = 0 ] && pass "$nseg segments (version $version): stock ≥ 0, t = stock + s, o = live orders (parts are not orders), s = Σ their units, r = Σ those of holds, due set = the holds"
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
