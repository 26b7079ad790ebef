# shellcheck shell=bash
# loadtest/peers/lib.sh — builds, starts, preheats and checks the SPEC §9 peers (the seeds'
# algorithm in Go, Node and OpenResty, and OpenResty's lockless one-script decrement); shared
# by loadtest/peers.sh (the benchmark) and scripts/tests/peers_test.sh (the ctest test that keeps
# them working). Sourced, never run. Their packages: scripts/deps.sh --peers.
#
#   peers_build OUT_DIR       the Go binary (offline: Debian's golang-go + redigo, GOPATH mode)
#                             into OUT_DIR/peer-go; checks the Node peer's node_modules (npm ci)
#   peer_launch KIND PORT REDIS_PORT SEGMENTS RUN_DIR LOG
#                             starts peer KIND (go, node, openresty, lockless) in the background
#                             on 127.0.0.1:PORT; sets $peer_pid (nginx runs in the foreground)
#   peer_preheat REDIS_PORT SKU STOCK SEGMENTS
#                             the SKU's segments (STOCK split evenly, the rest to the first ones),
#                             no order record, no lock
#   peer_verify REDIS_PORT SKU STOCK SEGMENTS CREATED UNITS UNANSWERED
#                             prints one VERIFY line; 1 when an invariant fails: every segment ≥ 0,
#                             STOCK − Σ segments = the units of the order records, and their count
#                             and units = the 201 answers counted (CREATED, UNITS), exactly when
#                             UNANSWERED is 0, else within UNANSWERED more
peers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034 # peer_kinds and peer_pid are for the sourcing script
peer_kinds="go node openresty lockless"

peers_build() {
  local out=$1
  mkdir -p "$out"
  command -v go >/dev/null || { echo "peers: go is missing (scripts/deps.sh --peers)" >&2; return 1; }
  [ -d /usr/share/gocode/src/github.com/gomodule/redigo ] ||
    { echo "peers: redigo is missing (scripts/deps.sh --peers)" >&2; return 1; }
  (cd "$peers_dir/go" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/gocache" \
    GOFLAGS='' timeout 300 go build -o "$out/peer-go" main.go) || { echo "peers: go build failed" >&2; return 1; }
  peer_go_bin=$out/peer-go
  command -v node >/dev/null || { echo "peers: node is missing (scripts/deps.sh --peers)" >&2; return 1; }
  [ -d "$peers_dir/node/node_modules/redlock" ] ||
    { echo "peers: $peers_dir/node/node_modules is missing (scripts/deps.sh --peers runs npm ci)" >&2; return 1; }
  [ -f /usr/share/nginx/modules/ngx_http_lua_module.so ] ||
    { echo "peers: libnginx-mod-http-lua is missing (scripts/deps.sh --peers)" >&2; return 1; }
  [ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ] ||
    { echo "peers: lua-cjson is missing (scripts/deps.sh --peers)" >&2; return 1; }
}

peer_launch() {
  local kind=$1 port=$2 rport=$3 seg=$4 run=$5 logf=$6 script
  case $kind in
    go)
      "$peer_go_bin" -listen "127.0.0.1:$port" -redis "127.0.0.1:$rport" -segments "$seg" 2>>"$logf" &
      ;;
    node)
      PORT=$port REDIS_PORT=$rport SEGMENTS=$seg node "$peers_dir/node/server.js" >>"$logf" 2>&1 &
      ;;
    openresty | lockless)
      script=seed.lua
      [ "$kind" = lockless ] && script=lockless.lua
      mkdir -p "$run/tmp"
      sed -e "s|@RUN_DIR@|$run|g" -e "s|@LISTEN@|127.0.0.1:$port|g" -e "s|@LUA_DIR@|$peers_dir/openresty|g" \
        -e "s|@SCRIPT@|$script|g" -e "s|@REDIS_PORT@|$rport|g" -e "s|@SEGMENTS@|$seg|g" \
        "$peers_dir/openresty/nginx.conf.template" >"$run/nginx.conf"
      nginx -p "$run" -c "$run/nginx.conf" -e "$run/error.log" >>"$logf" 2>&1 &
      ;;
    *) echo "peers: unknown kind $kind" >&2; return 2 ;;
  esac
  # shellcheck disable=SC2034
  peer_pid=$!
}

peer_preheat() {
  local rport=$1 sku=$2 stock=$3 seg=$4 k each rest args=()
  each=$((stock / seg)) rest=$((stock % seg))
  for ((k = 0; k < seg; k++)); do
    args+=("peer:{$sku}:stock:$k" $((each + (k < rest ? 1 : 0))))
  done
  redis-cli -p "$rport" DEL "peer:{$sku}:orders" >/dev/null &&
    for ((k = 0; k < seg; k++)); do echo "DEL peer:{$sku}:lock:$k"; done | redis-cli -p "$rport" >/dev/null &&
    redis-cli -p "$rport" MSET "${args[@]}" >/dev/null
}

# The units of the order records, added up inside Redis (one EVAL; cjson is Redis's own).
peer_units_script='local n = 0
for _, r in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do n = n + cjson.decode(r).quantity end
return n'

peer_verify() {
  local rport=$1 sku=$2 stock=$3 seg=$4 created=$5 units=$6 unanswered=$7 k v sum=0 neg=0
  local orders rec_units ok=1 why=""
  for ((k = 0; k < seg; k++)); do
    v=$(redis-cli -p "$rport" GET "peer:{$sku}:stock:$k")
    [ "$v" -lt 0 ] && neg=$((neg + 1))
    sum=$((sum + v))
  done
  orders=$(redis-cli -p "$rport" LLEN "peer:{$sku}:orders")
  rec_units=$(redis-cli -p "$rport" EVAL "$peer_units_script" 1 "peer:{$sku}:orders")
  [ "$neg" -eq 0 ] || { ok=0; why+=" negative_segments=$neg"; }
  [ "$sum" -ge 0 ] || { ok=0; why+=" oversold"; }
  [ $((stock - sum)) -eq "$rec_units" ] || { ok=0; why+=" sold!=record_units"; }
  if [ "$unanswered" -eq 0 ]; then
    [ "$orders" -eq "$created" ] || { ok=0; why+=" records!=created"; }
    [ "$rec_units" -eq "$units" ] || { ok=0; why+=" record_units!=units"; }
  else
    if [ "$orders" -lt "$created" ] || [ "$orders" -gt $((created + unanswered)) ]; then
      ok=0; why+=" records_out_of_bounds"
    fi
    [ "$rec_units" -ge "$units" ] || { ok=0; why+=" record_units<units"; }
  fi
  echo "VERIFY ok=$ok remaining=$sum sold=$((stock - sum)) records=$orders record_units=$rec_units created=$created units=$units unanswered=$unanswered${why}"
  [ "$ok" = 1 ]
}
