#!/usr/bin/env bash
# The waiting room's pages in a real browser (issue 32, SPEC §16): Debian's chromium driven by
# playwright-core (queue_page.mjs) against one inventoryd (--jwt-key-file: the buyers are HS256
# JWTs minted by the test; --queue-key-file; the admin token for the dashboard) and a
# redis-server on free loopback ports. A buyer walks through the queue page (GET /queue) to an
# order while the dashboard (GET /) shows the room's counters and pauses it. About 25 s. The
# screenshots are kept in $INVENTORY_BUILD_DIR/e2e-artifacts/ (ARTIFACT_DIR overrides). Skips
# (exit 77) when chromium or the npm packages are missing, except under CI=true.
set -euo pipefail
source "$(dirname "$0")/../../../scripts/tests/lib.sh"
t_need_npm
t_need chromium redis-server curl
token=queue-page-token-$RANDOM$RANDOM
artifacts=${ARTIFACT_DIR:-$build_dir/e2e-artifacts}
jwt_secret=queue-page-jwt-secret-$RANDOM$RANDOM-of-32-bytes-or-more
printf '%s' "$jwt_secret" >"$t_dir/jwt.key"
printf '%s' "queue-page-queue-key-$RANDOM$RANDOM-of-32-bytes-or-more" >"$t_dir/queue.key"
t_port; redis_port=$port; t_redis "$redis_port"
t_inventoryd main.log --redis "redis://127.0.0.1:$redis_port" --admin-token "$token" --threads 2 \
  --jwt-key-file "$t_dir/jwt.key" --queue-key-file "$t_dir/queue.key" --log-level warn
t_run "a buyer through the queue page to an order; the dashboard's queue (screenshots in $artifacts/)" \
  queue_page.log env URL_MAIN="http://127.0.0.1:$port" TOKEN="$token" JWT_SECRET="$jwt_secret" \
  ARTIFACT_DIR="$artifacts" node "$e2e_dir/queue_page.mjs"
t_done
