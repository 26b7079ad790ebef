-- status.lua: the mixed scenario, 90 % orders (POST /api/v1/orders) and 10 % status reads
-- (GET /api/v1/skus/{sku}); every tenth request of a thread is a read.
-- Env: LT_SKU, LT_QTY (1), LT_READ_EVERY (10), LT_WINDOW_S. Prints common.lua's RESULT line;
-- reads answered 200 are counted as s200, orders as created/s409/...
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local sku = os.getenv("LT_SKU") or "sku"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local every = tonumber(os.getenv("LT_READ_EVERY") or "10")
local order_req, read_req
local n = 0

function init(args)
  order_req = wrk.format("POST", "/api/v1/orders", { ["Content-Type"] = "application/json" },
    string.format('{"sku":"%s","quantity":%d}', sku, qty))
  read_req = wrk.format("GET", "/api/v1/skus/" .. sku)
end

function request()
  if not lt.real_call() then return order_req end
  if not lt.in_window() then return lt.drain() end
  n = n + 1
  if n % every == 0 then
    lt.c.sent_reads = lt.c.sent_reads + 1
    return read_req
  end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return order_req
end

function response(status, headers, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
