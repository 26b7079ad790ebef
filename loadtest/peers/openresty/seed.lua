-- seed.lua: the seeds' algorithm in OpenResty (nginx + Lua cosockets), one of the SPEC §9 peers
-- that loadtest/peers.sh measures beside inventoryd; content_by_lua_file of POST /api/v1/orders.
-- From a random segment on: SET lock NX PX with a random token, GET the stock, check, DECRBY,
-- RPUSH the order record, release with the compare-and-delete script; a busy or short segment
-- sends the order to the next one. 201 the order; 409 sold_out when a whole round found every
-- segment short; 503 lock_timeout when segments stayed busy past the deadline; 404 unknown_sku.
local peer = require("peer")

local RELEASE = [[
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0]]
local RELEASE_SHA = peer.sha1_hex(RELEASE)

local s = peer.settings()
local sku, qty = peer.read_order()
local red = peer.connect(s)

local function redis_failed(err)
  red:close()
  return peer.fail(503, "unavailable", "redis: " .. tostring(err))
end

local start = math.random(0, s.segments - 1)
local deadline = ngx.now() + s.deadline_s
while true do
  local busy = false
  for i = 0, s.segments - 1 do
    local k = (start + i) % s.segments
    local lock_key, stock_key = peer.key(sku, "lock", k), peer.key(sku, "stock", k)
    local token = peer.random_hex()
    local ok, err = red:call("SET", lock_key, token, "NX", "PX", s.lock_ttl)
    if ok == nil then return redis_failed(err) end
    if ok == ngx.null then
      busy = true
    else
      local stock
      stock, err = red:call("GET", stock_key)
      if stock == nil then return redis_failed(err) end
      local order
      if stock ~= ngx.null and tonumber(stock) >= qty then
        local r
        r, err = red:call("DECRBY", stock_key, qty)
        if r == nil then return redis_failed(err) end
        order = peer.order(sku, qty, k)
        r, err = red:call("RPUSH", peer.orders_key(sku), peer.encode(order))
        if r == nil then return redis_failed(err) end
      end
      local r
      r, err = peer.evalsha(red, RELEASE_SHA, RELEASE, 1, lock_key, token)
      if r == nil then return redis_failed(err) end
      if stock == ngx.null then
        red:keepalive()
        return peer.fail(404, "unknown_sku", "no such SKU")
      end
      if order then
        red:keepalive()
        return peer.reply(201, order, { Location = "/api/v1/orders/" .. order.order_id })
      end
    end
  end
  if not busy then
    red:keepalive()
    return peer.fail(409, "sold_out", "the SKU is sold out")
  end
  if ngx.now() > deadline then
    red:keepalive()
    return peer.fail(503, "lock_timeout", "every segment stayed locked", { ["Retry-After"] = "1" })
  end
  ngx.sleep(0.001)
end
