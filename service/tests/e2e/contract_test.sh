#!/usr/bin/env bash
# The API contract (issue 14): docs/openapi.yaml is linted with @redocly/cli (redocly.yaml), then
# contract.mjs sends every documented request and error to live inventoryd instances on free
# loopback ports (one normal, one whose Redis is absent, one rate-limited, one holding its
# lock for 3 s: its loop serves the second order meanwhile; for the sale rules of SPEC §11 one
# with --trust-body-user-id, one with --jwt-key-file, which also has --queue-key-file for the
# waiting room, and for the waiting room's challenge one with --queue-key-file and --user-rps)
# against a real redis-server, and
# validates every response against the document with ajv. The normal one also reads a confirm
# token (--confirm-token-file). Everything started here is stopped by lib.sh's trap, also on failure.
set -euo pipefail
source "$(dirname "$0")/../../../scripts/tests/lib.sh"
t_need_npm
t_need redis-server curl
token=contract-token-$RANDOM$RANDOM
spec=$repo/docs/openapi.yaml

lint() { (cd "$e2e_dir" && node_modules/.bin/redocly lint --config redocly.yaml "$spec"); }
t_run "redocly lint docs/openapi.yaml" lint.log lint

t_port; redis_port=$port; t_redis "$redis_port"
t_port; dead_port=$port # nothing listens there
confirm_token=contract-confirm-$RANDOM$RANDOM
printf '%s' "$confirm_token" >"$t_dir/confirm.token"
jwt_secret=contract-jwt-secret-$RANDOM$RANDOM-of-32-bytes-or-more
printf '%s' "$jwt_secret" >"$t_dir/jwt.key"
printf '%s' "contract-queue-key-$RANDOM$RANDOM-of-32-bytes-or-more" >"$t_dir/queue.key"
common=(--admin-token "$token" --threads 2 --log-level warn)
t_inventoryd main.log --redis "redis://127.0.0.1:$redis_port" --confirm-token-file "$t_dir/confirm.token" \
  "${common[@]}"; main=$port
t_inventoryd user.log --redis "redis://127.0.0.1:$redis_port" --trust-body-user-id "${common[@]}"; user=$port
t_inventoryd jwt.log --redis "redis://127.0.0.1:$redis_port" --jwt-key-file "$t_dir/jwt.key" \
  --queue-key-file "$t_dir/queue.key" "${common[@]}"; jwt=$port
t_inventoryd down.log --redis "redis://127.0.0.1:$dead_port" --redis-timeout-ms 300 "${common[@]}"; down=$port
t_inventoryd rate.log --redis "redis://127.0.0.1:$redis_port" --rate-limit-rps 1 --rate-limit-burst 1 "${common[@]}"; rate=$port
head -c 48 /dev/urandom | base64 >"$t_dir/queue.key"
t_inventoryd queue.log --redis "redis://127.0.0.1:$redis_port" --jwt-key-file "$t_dir/jwt.key" \
  --queue-key-file "$t_dir/queue.key" --user-rps 3 "${common[@]}"; queue=$port
t_inventoryd hold.log --redis "redis://127.0.0.1:$redis_port" --hold-ms 3000 --lock-wait-ms 0 "${common[@]}"; hold=$port

t_run "every documented request and error, validated against docs/openapi.yaml" contract.log \
  env SPEC="$spec" TOKEN="$token" URL_MAIN="http://127.0.0.1:$main" URL_DOWN="http://127.0.0.1:$down" \
  URL_RATE="http://127.0.0.1:$rate" URL_HOLD="http://127.0.0.1:$hold" URL_USER="http://127.0.0.1:$user" \
  URL_JWT="http://127.0.0.1:$jwt" URL_QUEUE="http://127.0.0.1:$queue" CONFIRM_TOKEN="$confirm_token" JWT_SECRET="$jwt_secret" node "$e2e_dir/contract.mjs"
t_done
