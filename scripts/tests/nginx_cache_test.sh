#!/usr/bin/env bash
# The status cache of the shipped load-balancer config (config/nginx-lb.conf.template, issue 30,
# SPEC §15) in front of a real inventoryd and a real nginx:
#   - GET /api/v1/skus/{sku} is stored for the instance's max-age: a crowd of pollers through
#     nginx (wrk, 32 connections, 3 s, thousands of reads) reaches the instance once every
#     1-2 s (proxy_cache_lock, stale-while-updating), counted by the instance itself
#     (inventory_status_answers_total);
#   - a client's If-None-Match with the current ETag is answered 304;
#   - ?consistent=1 (the exact admin read) and Authorization'd reads go past the cache, every
#     one of them to the instance; the order path and /healthz are not cached at all;
#   - admin methods from remote clients are still refused (403) on the cached route;
#   - the event stream passes through (its own location, unbuffered): the status, then a change.
# About 8 s. The bound allows 2 instance reads per elapsed second plus 2 (nginx keeps a max-age=1
# entry until the end of the next second of its clock: one refresh every 1-2 s, and wrk's
# 40,000 reads reached the instance 1-2 times in 3 s here); thousands without the cache.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v nginx >/dev/null || { echo "nginx is not installed (scripts/deps.sh)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/deps.sh)" >&2; exit 1; }

token=nginx-cache-token-$RANDOM$RANDOM
printf '%s\n' "$token" >"$t_dir/token"
chmod 600 "$t_dir/token"
printf 'Authorization: Bearer %s\n' "$token" >"$t_dir/auth.header"

t_port; redis_port=$port
t_redis "$redis_port"
t_port; inst=$port
"$bin" --port "$inst" --bind 127.0.0.1 --redis "redis://127.0.0.1:$redis_port" --threads 2 \
  --admin-token-file "$t_dir/token" --trusted-proxies 127.0.0.1/32,::1 --log-level warn \
  2>"$t_dir/inventoryd.log" &
t_pids+=($!)
t_wait 100 curl -fsS "http://127.0.0.1:$inst/healthz" || { cat "$t_dir/inventoryd.log" >&2; exit 1; }

t_port; lb=$port
# nginx started as root runs its worker as nobody, which must reach the status cache in
# nginx/tmp (mktemp made $t_dir 0700; the token in it stays 0600).
chmod 755 "$t_dir"
mkdir -p "$t_dir/nginx/tmp"
awk -v run="$t_dir/nginx" -v listen="127.0.0.1:$lb" -v ups="        server 127.0.0.1:$inst;" '
  /^[[:space:]]*#/ { print; next }
  { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
  /@UPSTREAM_SERVERS@/ { print ups; next }
  { print }' "$repo/config/nginx-lb.conf.template" >"$t_dir/nginx/nginx.conf"
nginx -p "$t_dir/nginx" -c "$t_dir/nginx/nginx.conf" -e "$t_dir/nginx/error.log" \
  >"$t_dir/nginx.log" 2>&1 &
t_pids+=($!)
t_wait 100 curl -fsS -o /dev/null "http://127.0.0.1:$lb/nginx-204" || { cat "$t_dir/nginx/error.log" "$t_dir/nginx.log" >&2; exit 1; }
base=http://127.0.0.1:$lb
sku=cache-$RANDOM
json=(-H 'Content-Type: application/json')
auth=(-H "@$t_dir/auth.header")

# reached: the status reads the instance has answered so far (200/404 and 304 from its
# snapshot), read from the instance itself, not through nginx.
reached() {
  curl -fsS --max-time 5 "http://127.0.0.1:$inst/metrics" |
    awk '/^inventory_status_answers_total\{/ { n += $NF } END { printf "%d\n", n }'
}
# head_of FILE NAME: the value of header NAME in the curl -D dump FILE ("" when absent).
head_of() { tr -d '\r' <"$1" | awk -v h="$(tr '[:upper:]' '[:lower:]' <<<"$2"):" 'tolower($1) == h { $1 = ""; sub(/^ /, ""); print; exit }'; }
# get FROM PATH [curl args...]: GET through nginx from address FROM; status on stdout, the
# headers in $t_dir/h, the body in $t_dir/b.
get() {
  local from=$1 path=$2; shift 2
  rm -f "$t_dir/b" # (curl leaves an old file as it was when the answer has no body)
  curl -s --max-time 10 -D "$t_dir/h" -o "$t_dir/b" -w '%{http_code}' --interface "$from" "$@" "$base$path"
}

t_check "PUT of the SKU through nginx from the host: 201" \
  test "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "${auth[@]}" "${json[@]}" \
    -d '{"stock":1000,"segments":16}' "$base/api/v1/skus/$sku")" = 201

# The first read fills the cache.
t_check "GET of the status through nginx: 200" test "$(get 127.0.0.2 "/api/v1/skus/$sku")" = 200
echo "     first read: X-Cache-Status $(head_of "$t_dir/h" X-Cache-Status), Cache-Control $(head_of "$t_dir/h" Cache-Control), ETag $(head_of "$t_dir/h" ETag)"
t_check "...with an X-Cache-Status header" test -n "$(head_of "$t_dir/h" X-Cache-Status)"
t_check "...with the instance's Cache-Control (public, max-age)" \
  grep -qi '^cache-control: public, max-age=' "$t_dir/h"
etag=$(head_of "$t_dir/h" ETag)
t_check "...and its strong ETag" grep -q '^"[0-9a-f]*"$' <<<"$etag"

# The crowd: 32 pollers for 3 s from 127.0.0.1 through nginx.
before=$(reached)
t0=$(date +%s%N)
wrk -t1 -c32 -d3s --timeout 5s "$base/api/v1/skus/$sku" >"$t_dir/wrk.txt" 2>&1 || true
t1=$(date +%s%N)
after=$(reached)
reads=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$t_dir/wrk.txt")
non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$t_dir/wrk.txt")
elapsed_s=$(((t1 - t0 + 999999999) / 1000000000))
bound=$((2 * elapsed_s + 2))
echo "     wrk: ${reads:-?} reads through nginx in ${elapsed_s} s (non-2xx: ${non2xx:-0}); the instance answered $((after - before)) of them (bound $bound)"
t_check "the crowd was a crowd (at least 1,000 reads through nginx)" test "${reads:-0}" -ge 1000
t_check "every read was answered 200" test -z "$non2xx"
t_check "at most about one read a second reached the instance ($((after - before)) <= $bound)" \
  test $((after - before)) -le "$bound"

# The client's own revalidation: nginx (or the instance) answers 304 to the current ETag. The
# ETag is read again first: a refresh may have changed it (it does not here: nothing sells).
get 127.0.0.2 "/api/v1/skus/$sku" >/dev/null
etag=$(head_of "$t_dir/h" ETag)
t_check "If-None-Match with the current ETag through nginx: 304" \
  test "$(get 127.0.0.2 "/api/v1/skus/$sku" -H "If-None-Match: $etag")" = 304
t_check "...with no body" test ! -s "$t_dir/b"

# Past the cache: the exact read and Authorization'd reads, each one to the instance.
before=$(reached)
code=$(get 127.0.0.1 "/api/v1/skus/$sku?consistent=1" "${auth[@]}")
t_check "?consistent=1 with the token through nginx: 200" test "$code" = 200
t_check "...is the exact read (Cache-Control: no-store), not the cached answer" \
  grep -qi '^cache-control: no-store' "$t_dir/h"
t_check "...and says BYPASS" test "$(head_of "$t_dir/h" X-Cache-Status)" = BYPASS
code=$(get 127.0.0.2 "/api/v1/skus/$sku?consistent=1")
t_check "?consistent=1 without the token: 401 from the instance, not a cached 200" test "$code" = 401
for i in 1 2 3 4 5; do get 127.0.0.2 "/api/v1/skus/$sku" "${auth[@]}" >"$t_dir/code$i"; done
t_check "a GET with Authorization says BYPASS" test "$(head_of "$t_dir/h" X-Cache-Status)" = BYPASS
after=$(reached)
# (?consistent=1 is the exact read: not a snapshot answer, not counted in reached)
t_check "the 5 Authorization'd GETs all reached the instance ($((after - before)) >= 5)" \
  test $((after - before)) -ge 5
before=$(reached)
for i in 1 2 3 4 5; do get 127.0.0.2 "/api/v1/skus/$sku?v=$i" >/dev/null; done
after=$(reached)
t_check "GETs with a query string are not cached ($((after - before)) >= 5 reached the instance)" \
  test $((after - before)) -ge 5

# Other routes are not cached.
code=$(curl -s -D "$t_dir/h" -o "$t_dir/b" -w '%{http_code}' --interface 127.0.0.3 -X POST "${json[@]}" \
  -d "{\"sku\":\"$sku\",\"quantity\":1}" "$base/api/v1/orders")
t_check "an order through nginx: 201" test "$code" = 201
t_check "...not through the cache (no X-Cache-Status)" test -z "$(head_of "$t_dir/h" X-Cache-Status)"
t_check "/healthz is not cached" \
  test "$(get 127.0.0.2 /healthz)" = 200 -a -z "$(head_of "$t_dir/h" X-Cache-Status)"

# The cached route still refuses admin methods to remote clients.
code=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 -X PUT "${auth[@]}" "${json[@]}" \
  -d '{"stock":1,"segments":1}' "$base/api/v1/skus/$sku")
t_check "PUT of the SKU from 127.0.0.2: 403" test "$code" = 403
code=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 -X DELETE "${auth[@]}" "$base/api/v1/skus/$sku")
t_check "DELETE of the SKU from 127.0.0.2: 403" test "$code" = 403

# The order shows through the cache within a few seconds (max-age 1 s + the snapshot's 250 ms).
sold_now() { get 127.0.0.2 "/api/v1/skus/$sku" >/dev/null; grep -q '"sold":1[,}]' "$t_dir/b"; }
t_check "the cached status shows the order within 5 s" t_wait 50 sold_now

# The event stream passes through nginx as it is written (its own location: no buffering, no
# cache): the status at once, then the next order's change, while the stream stays open.
curl -sN --max-time 4 --interface 127.0.0.2 "$base/api/v1/skus/$sku/events" >"$t_dir/events" 2>/dev/null &
stream=$!
first_event() { grep -q '^event: status' "$t_dir/events"; }
t_check "the event stream through nginx sends the status at once" t_wait 30 first_event
curl -s -o /dev/null --interface 127.0.0.3 -X POST "${json[@]}" -d "{\"sku\":\"$sku\",\"quantity\":1}" \
  "$base/api/v1/orders"
second_event() { [ "$(grep -c '^event: status' "$t_dir/events")" -ge 2 ]; }
t_check "...and the next order's change while it is open" t_wait 30 second_event
wait "$stream" 2>/dev/null || true
t_done
