#!/usr/bin/env bash
# inventoryd and a real Prometheus (issue 14): three inventoryd instances and a redis-server on
# free loopback ports, Debian's prometheus scraping them every second (its own temp config and
# storage, config/prometheus-alerts.yml loaded), a short load, then Prometheus's HTTP API is
# asked for the order rate, the lock-acquire p99 (histogram_quantile) and the HTTP p99 by
# route; every query of docs/grafana-dashboard.json must answer with data; stopping an instance
# must put InventorydInstanceDown in pending. Also `promtool check metrics` on /metrics and
# `promtool check rules` on the alerts. Skips (exit 77) without prometheus, except under CI=true.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
t_need prometheus promtool redis-server curl jq wrk
rules=$repo/config/prometheus-alerts.yml
grafana=$repo/docs/grafana-dashboard.json
token=prom-token-$RANDOM

t_check "promtool check rules config/prometheus-alerts.yml" promtool check rules "$rules"
json_ok() { jq -e "$1" "$2" >/dev/null; }
t_check "docs/grafana-dashboard.json is JSON with panels" \
  json_ok '(.panels | length) > 0 and all(.panels[]; (.targets | length) > 0)' "$grafana"

t_port; redis_port=$port; t_redis "$redis_port"
ports=() pids=()
for i in 1 2 3; do
  t_inventoryd "inventoryd$i.log" --redis "redis://127.0.0.1:$redis_port" --admin-token "$token" \
    --threads 2 --log-level warn
  ports+=("$port"); pids+=("${t_pids[-1]}")
done
curl -fsS -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"stock":1000000,"segments":8}' "http://127.0.0.1:${ports[0]}/api/v1/skus/prom" >/dev/null
curl -fsS "http://127.0.0.1:${ports[0]}/metrics" >"$t_dir/metrics.txt"
check_metrics() { promtool check metrics <"$t_dir/metrics.txt"; }
t_run "promtool check metrics on /metrics" promtool.log check_metrics

t_port; prom_port=$port
targets=$(printf '"127.0.0.1:%s",' "${ports[@]}")
cat >"$t_dir/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$rules"]
scrape_configs:
  - job_name: inventoryd
    static_configs:
      - targets: [${targets%,}]
YML
prometheus --config.file="$t_dir/prometheus.yml" --storage.tsdb.path="$t_dir/prom-data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$t_dir/prometheus.log" 2>&1 &
t_pids+=($!)
api=http://127.0.0.1:$prom_port/api/v1
t_wait 300 curl -fsS "http://127.0.0.1:$prom_port/-/ready" || {
  cat "$t_dir/prometheus.log" >&2; echo "prometheus did not start" >&2; exit 1; }

# q EXPR: the instant query's result vector (JSON) in $out; 1 when the query failed.
q() { out=$(curl -fsS --get --data-urlencode "query=$1" "$api/query") && jq -e '.status == "success"' <<<"$out" >/dev/null; }
# until_q TENTHS EXPR JQ: repeats the query until JQ (on .data.result) holds.
until_q() {
  local n=$1 expr=$2 test=$3 i
  for ((i = 0; i < n; i++)); do
    if q "$expr" && jq -e ".data.result | $test" <<<"$out" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "   query: $expr" >&2; echo "   last answer: ${out:-none}" >&2
  return 1
}
t_check "Prometheus scrapes all 3 instances (up == 1)" until_q 200 'sum(up{job="inventoryd"})' '.[0].value[1] == "3"'

cat >"$t_dir/order.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"sku":"prom"}'
LUA
for p in "${ports[@]}"; do
  wrk -t1 -c4 -d5s -s "$t_dir/order.lua" "http://127.0.0.1:$p/api/v1/orders" >"$t_dir/wrk-$p.log" 2>&1 &
  t_pids+=($!)
done
wait "${t_pids[@]: -3}"

t_check "order rate: sum(rate(inventory_orders_total{result=\"created\"}[15s])) > 0" \
  until_q 100 'sum(rate(inventory_orders_total{result="created"}[15s]))' '(.[0].value[1] | tonumber) > 0'
echo "     orders/s: $(jq -r '.data.result[0].value[1]' <<<"$out")"
t_check "lock-acquire p99 (histogram_quantile) is a number" \
  until_q 100 'histogram_quantile(0.99, sum by (le) (rate(inventory_lock_acquire_seconds_bucket[15s])))' \
  '(.[0].value[1] | tonumber) > 0'
echo "     lock acquire p99: $(jq -r '.data.result[0].value[1]' <<<"$out") s"
t_check "HTTP p99 of POST /api/v1/orders by route" \
  until_q 100 'histogram_quantile(0.99, sum by (le, route) (rate(inventory_http_request_duration_seconds_bucket{route="/api/v1/orders"}[15s])))' \
  '(.[0].value[1] | tonumber) > 0'
t_check "inventory_build_info and process_start_time_seconds from each instance" \
  until_q 50 'count(inventory_build_info) + count(process_start_time_seconds) + count(process_open_fds)' '.[0].value[1] == "9"'

# Every query of the Grafana dashboard, with its variables filled in, answers with data.
while IFS= read -r expr; do
  e=${expr//\$job/inventoryd}; e=${e//\$instance/.*}; e=${e//\$__rate_interval/15s}
  t_check "grafana query has data: ${e:0:90}" until_q 50 "$e" 'length > 0'
done < <(jq -r '.panels[].targets[].expr' "$grafana")

# An instance stops: the InstanceDown alert goes pending (its 1m "for" is not waited out).
kill "${pids[2]}"
t_check "InventorydInstanceDown is pending after an instance stops" \
  until_q 200 'ALERTS{alertname="InventorydInstanceDown"}' 'length == 1'
t_done
