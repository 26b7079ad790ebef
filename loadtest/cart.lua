-- cart.lua: wrk script posting carts (SPEC §17): one order of LT_SKUS's items, LT_QTY units each.
-- Env: LT_SKUS ("c0,c1": the items, in that order; the first is the cart's home SKU), LT_QTY (1),
-- LT_USERS (0: no user; N: "user_id":"u<n>", n drawn at random per request, for an instance
-- started with --trust-body-user-id),
-- LT_WINDOW_S, LT_OK (common.lua). Prints the RESULT line of common.lua, where created = carts
-- answered 201 and units = the home item's units (a cart's answer carries the home item's
-- quantity); lines = created × items. Usage: wrk -s loadtest/cart.lua URL/api/v1/orders
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local skus = os.getenv("LT_SKUS") or "c0,c1"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local users = tonumber(os.getenv("LT_USERS") or "0")
local items_text

function init(args)
  local items = {}
  for s in skus:gmatch("[^,]+") do
    items[#items + 1] = string.format('{"sku":"%s","quantity":%d}', s, qty)
  end
  items_text = '"items":[' .. table.concat(items, ",") .. ']'
end

local function body()
  if users > 0 then
    return string.format('{%s,"user_id":"u%d"}', items_text, math.random(users))
  end
  return "{" .. items_text .. "}"
end

function request()
  if not lt.real_call() then
    return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body())
  end
  if not lt.in_window() then return lt.drain() end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body())
end

function response(status, headers, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
