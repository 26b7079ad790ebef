#!/usr/bin/env bash
# The shipped load-balancer config (config/nginx-lb.conf.template) in front of two real
# inventoryd instances that trust it (--trusted-proxies), issue #10:
#   - it passes the client's address on (X-Forwarded-For / X-Real-IP): inventoryd's per-client
#     rate limit then tells two clients of the one proxy apart;
#   - it refuses admin methods and /metrics to clients other than the host itself (403), and
#     serves them to the host (the token is still checked by inventoryd);
#   - it has its own limit_req on the order path (429 with its JSON body).
# "Other clients" are 127.0.0.2, 127.0.0.3, ... (curl --interface): loopback addresses that are
# not the host's 127.0.0.1. No timing assertion: every limit is hit by a margin of many seconds.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v nginx >/dev/null || { echo "nginx is not installed (scripts/deps.sh)" >&2; exit 1; }

token=nginx-test-token-$RANDOM$RANDOM
printf '%s\n' "$token" >"$t_dir/token"
chmod 600 "$t_dir/token"
printf 'Authorization: Bearer %s\n' "$token" >"$t_dir/auth.header"

t_port; redis_port=$port
t_redis "$redis_port"
ups=""
inst=()
for i in 0 1; do
  t_port; inst+=("$port")
  "$bin" --port "$port" --bind 127.0.0.1 --redis "redis://127.0.0.1:$redis_port" --threads 2 \
    --admin-token-file "$t_dir/token" --trusted-proxies 127.0.0.1/32,::1 \
    --rate-limit-rps 1 --rate-limit-burst 3 --log-level warn 2>"$t_dir/inventoryd$i.log" &
  t_pids+=($!)
  ups+="        server 127.0.0.1:$port;"$'\n'
done
for p in "${inst[@]}"; do
  t_wait 100 curl -fsS "http://127.0.0.1:$p/healthz" || { cat "$t_dir"/inventoryd*.log >&2; exit 1; }
done

t_port; lb=$port
# nginx started as root runs its worker as nobody, which must reach the status cache in
# nginx/tmp (mktemp made $t_dir 0700; the token in it stays 0600).
chmod 755 "$t_dir"
mkdir -p "$t_dir/nginx/tmp"
awk -v run="$t_dir/nginx" -v listen="127.0.0.1:$lb" -v ups="${ups%$'\n'}" '
  /^[[:space:]]*#/ { print; next }
  { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
  /@UPSTREAM_SERVERS@/ { print ups; next }
  { print }' "$repo/config/nginx-lb.conf.template" >"$t_dir/nginx/nginx.conf"
nginx -p "$t_dir/nginx" -c "$t_dir/nginx/nginx.conf" -e "$t_dir/nginx/error.log" \
  >"$t_dir/nginx.log" 2>&1 &
t_pids+=($!)
t_wait 100 curl -fsS -o /dev/null "http://127.0.0.1:$lb/nginx-204" || { cat "$t_dir/nginx/error.log" "$t_dir/nginx.log" >&2; exit 1; }
base=http://127.0.0.1:$lb

# code FROM METHOD PATH [curl args...]: the status of one request from address FROM.
code() {
  local from=$1 method=$2 path=$3; shift 3
  curl -s -o "$t_dir/body" -w '%{http_code}' --interface "$from" -X "$method" "$@" "$base$path"
}
json=(-H 'Content-Type: application/json')
auth=(-H "@$t_dir/auth.header")
sku=lb-$RANDOM

# Admin from the host itself: passed on, and inventoryd wants the token.
t_check "PUT from the host without the token: 401 from inventoryd" \
  test "$(code 127.0.0.1 PUT "/api/v1/skus/$sku" "${json[@]}" -d '{"stock":100,"segments":4}')" = 401
t_check "PUT from the host with the token: 201" \
  test "$(code 127.0.0.1 PUT "/api/v1/skus/$sku" "${auth[@]}" "${json[@]}" -d '{"stock":100,"segments":4}')" = 201
t_check "/metrics from the host: 200" test "$(code 127.0.0.1 GET /metrics)" = 200

# Admin and /metrics from anyone else: refused at the balancer, even with the right token.
t_check "PUT from 127.0.0.2 with the token: 403" \
  test "$(code 127.0.0.2 PUT "/api/v1/skus/$sku" "${auth[@]}" "${json[@]}" -d '{"stock":1,"segments":1}')" = 403
t_check "the 403 is JSON" grep -q '"error":"forbidden"' "$t_dir/body"
t_check "DELETE of the SKU from 127.0.0.2: 403" test "$(code 127.0.0.2 DELETE "/api/v1/skus/$sku" "${auth[@]}")" = 403
t_check "cancel an order from 127.0.0.2: 403" test "$(code 127.0.0.2 DELETE "/api/v1/orders/x-0-$sku" "${auth[@]}")" = 403
t_check "restock from 127.0.0.2: 403" \
  test "$(code 127.0.0.2 POST "/api/v1/skus/$sku/restock" "${auth[@]}" "${json[@]}" -d '{"quantity":5}')" = 403
t_check "/metrics from 127.0.0.2: 403" test "$(code 127.0.0.2 GET /metrics)" = 403
t_check "GET the SKU from 127.0.0.2: 200" test "$(code 127.0.0.2 GET "/api/v1/skus/$sku")" = 200
t_check "/healthz from 127.0.0.2: 200" test "$(code 127.0.0.2 GET /healthz)" = 200

# inventoryd's own per-client limit (1/s, bursts of 3) behind the balancer: 127.0.0.3 runs into
# it (within nginx's burst of 10), and 127.0.0.4, through the same nginx, still has its bucket.
order=(-X POST "${json[@]}" -d "{\"sku\":\"$sku\"}")
codes=$(curl -s -o /dev/null -w '%{http_code}\n' --interface 127.0.0.3 "${order[@]}" \
  "$base/api/v1/orders" "$base/api/v1/orders" "$base/api/v1/orders" "$base/api/v1/orders" \
  "$base/api/v1/orders" "$base/api/v1/orders" "$base/api/v1/orders" "$base/api/v1/orders" | tr '\n' ' ')
echo "     127.0.0.3, 8 orders: $codes"
t_check "127.0.0.3 reaches inventoryd's per-client limit (429)" grep -q 429 <<<"$codes"
t_check "...after at least 3 orders" test "$(grep -o 201 <<<"$codes" | wc -l)" -ge 3
t_check "127.0.0.4 through the same balancer is another client: 201" \
  test "$(code 127.0.0.4 POST /api/v1/orders "${json[@]}" -d "{\"sku\":\"$sku\"}")" = 201

# nginx's own limit on the order path (5/s, bursts of 10) for one client: 40 orders in one
# keep-alive curl; at least one is refused by the balancer (its JSON message says so).
urls=()
for _ in $(seq 40); do urls+=("$base/api/v1/orders" -o "$t_dir/lb-body-${#urls[@]}"); done
curl -s --interface 127.0.0.5 "${order[@]}" "${urls[@]}" >/dev/null || true
t_check "nginx limit_req answers 429 on the order path" \
  grep -lq 'too many requests from this address (load balancer)' "$t_dir"/lb-body-*

sold=$(curl -fsS "$base/api/v1/skus/$sku" | grep -o '"sold":[0-9]*' | head -1 | cut -d: -f2)
t_check "what inventoryd sold is consistent (sold $sold <= 100)" test "${sold:-999}" -le 100
t_done
