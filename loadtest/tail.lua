-- tail.lua: wrk script posting orders of one SKU with a random quantity 1..LT_QMAX (5) each,
-- for loadtest/tail.sh (the sell-out tail) and faults.sh's multikill. Env: LT_SKU, LT_QMAX (else
-- LT_QTY, else 5), LT_WINDOW_S and the rest as common.lua.
-- Prints the RESULT line of common.lua.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local sku = os.getenv("LT_SKU") or "sku"
local qmax = tonumber(os.getenv("LT_QMAX") or os.getenv("LT_QTY") or "5")
local reqs = {}

function init(args)
  for q = 1, qmax do
    reqs[q] = wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
      string.format('{"sku":"%s","quantity":%d}', sku, q))
  end
end

function request()
  local r = reqs[math.random(1, qmax)]
  if not lt.real_call() then return r end
  if not lt.in_window() then return lt.drain() end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return r
end

function response(status, headers, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
