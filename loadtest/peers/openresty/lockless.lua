-- lockless.lua: OpenResty's lockless one-script decrement, the SPEC §9 peer of inventoryd's
-- `atomic` strategy; content_by_lua_file of POST /api/v1/orders. No lock at all: one EVALSHA
-- per segment does check + DECRBY + RPUSH of the order record inside Redis, from a random
-- segment on, the next one when it is short. 201 the order; 409 sold_out when every segment
-- was short; 404 unknown_sku.
local peer = require("peer")

local DECREMENT = [[
local s = tonumber(redis.call("GET", KEYS[1]))
if s == nil then return -2 end
if s < tonumber(ARGV[1]) then return -1 end
redis.call("DECRBY", KEYS[1], ARGV[1])
redis.call("RPUSH", KEYS[2], ARGV[2])
return s - tonumber(ARGV[1])]]
local DECREMENT_SHA = peer.sha1_hex(DECREMENT)

local s = peer.settings()
local sku, qty = peer.read_order()
local red = peer.connect(s)

local start = math.random(0, s.segments - 1)
for i = 0, s.segments - 1 do
  local k = (start + i) % s.segments
  local order = peer.order(sku, qty, k)
  local r, err = peer.evalsha(red, DECREMENT_SHA, DECREMENT, 2, peer.key(sku, "stock", k),
    peer.orders_key(sku), qty, peer.encode(order))
  if r == nil then
    red:close()
    return peer.fail(503, "unavailable", "redis: " .. tostring(err))
  end
  if r == -2 then
    red:keepalive()
    return peer.fail(404, "unknown_sku", "no such SKU")
  end
  if r >= 0 then
    red:keepalive()
    return peer.reply(201, order, { Location = "/api/v1/orders/" .. order.order_id })
  end
end
red:keepalive()
return peer.fail(409, "sold_out", "the SKU is sold out")
