#!/bin/sh
# Entry point of the nginx container of docker-compose.yml: renders config/nginx-lb.conf.template
# (mounted at $TEMPLATE) with LISTEN (address:port) and UPSTREAMS (space-separated host:port of
# the instances), then runs nginx in the foreground. POSIX sh: the image has no bash to spare.
set -eu
TEMPLATE=${TEMPLATE:-/etc/inventoryd/nginx-lb.conf.template}
RUN_DIR=${RUN_DIR:-/run/inventoryd-lb}
: "${LISTEN:?LISTEN=address:port}"
: "${UPSTREAMS:?UPSTREAMS=host:port ...}"
mkdir -p "$RUN_DIR/tmp"
ups=""
for u in $UPSTREAMS; do ups="$ups        server $u;
"; done
awk -v run="$RUN_DIR" -v listen="$LISTEN" -v ups="$ups" '
  /^[[:space:]]*#/ { print; next }
  { gsub(/@RUN_DIR@/, run); gsub(/@LISTEN@/, listen) }
  /@UPSTREAM_SERVERS@/ { printf "%s", ups; next }
  { print }' "$TEMPLATE" >"$RUN_DIR/nginx.conf"
exec nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -e /dev/stderr
