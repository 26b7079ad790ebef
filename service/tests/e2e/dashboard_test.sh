#!/usr/bin/env bash
# The live dashboard (GET /) in a real browser (issue 14): Debian's chromium driven by
# playwright-core (dashboard.mjs; dashboard_events.mjs: the SKU list and the event stream, issue
# 30) against an inventoryd and a redis-server on free loopback ports. The screenshots are kept
# in $INVENTORY_BUILD_DIR/e2e-artifacts/ (ARTIFACT_DIR overrides). Skips (exit 77) when chromium
# or the npm packages are missing, except under CI=true.
set -euo pipefail
source "$(dirname "$0")/../../../scripts/tests/lib.sh"
t_need_npm
t_need chromium redis-server curl
token=dashboard-token-$RANDOM$RANDOM
artifacts=${ARTIFACT_DIR:-$build_dir/e2e-artifacts}
t_port; redis_port=$port; t_redis "$redis_port"
t_inventoryd main.log --redis "redis://127.0.0.1:$redis_port" --admin-token "$token" --threads 4 \
  --log-level warn
t_run "the dashboard in chromium (screenshots in $artifacts/)" dashboard.log \
  env URL_MAIN="http://127.0.0.1:$port" TOKEN="$token" ARTIFACT_DIR="$artifacts" node "$e2e_dir/dashboard.mjs"
t_run "the dashboard follows a SKU by its event stream (issue 30)" dashboard_events.log \
  env URL_MAIN="http://127.0.0.1:$port" TOKEN="$token" ARTIFACT_DIR="$artifacts" node "$e2e_dir/dashboard_events.mjs"
t_done
