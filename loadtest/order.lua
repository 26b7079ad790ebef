-- order.lua: wrk script posting orders of one SKU and counting the 201 units itself.
-- Env: LT_SKU (sku), LT_QTY (1: quantity per order), LT_WINDOW_S (10), LT_OK (201).
-- Prints the RESULT line of common.lua. Usage: wrk -s loadtest/order.lua URL/api/v1/orders
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local sku = os.getenv("LT_SKU") or "sku"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local order_req

function init(args)
  order_req = wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
    string.format('{"sku":"%s","quantity":%d}', sku, qty))
end

function request()
  if not lt.real_call() then return order_req end
  if not lt.in_window() then return lt.drain() end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return order_req
end

function response(status, headers, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
