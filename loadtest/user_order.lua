-- user_order.lua: order.lua with a user: each order's body names one of LT_USERS users
-- ("user_id":"u<n>", n drawn at random per request), for an instance started with
-- --trust-body-user-id (the sale rules of issue 20: limit_per_user counts per user).
-- Env: LT_SKU, LT_QTY (1), LT_USERS (100000), LT_WINDOW_S (10), LT_OK (201), LT_SEED (thread
-- index based). Prints the RESULT line of common.lua (its 201 units include reserved holds).
-- Usage: wrk -s loadtest/user_order.lua URL/api/v1/orders
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local sku = os.getenv("LT_SKU") or "sku"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local users = tonumber(os.getenv("LT_USERS") or "100000")
local headers = { ["Content-Type"] = "application/json" }

local function order_req()
  return wrk.format("POST", nil, headers,
    string.format('{"sku":"%s","quantity":%d,"user_id":"u%d"}', sku, qty, math.random(users)))
end

function init(args)
  math.randomseed(tonumber(os.getenv("LT_SEED") or "0") + 7919 * (lt_thread_index or 0) + os.time())
end

function request()
  if not lt.real_call() then return order_req() end
  if not lt.in_window() then return lt.drain() end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return order_req()
end

function response(status, headers_, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
