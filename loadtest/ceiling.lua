-- ceiling.lua: the same request as order.lua (POST with a small JSON body) for the ceiling
-- endpoints: the bare libmicrohttpd handler (201) and nginx's `return 204`. LT_OK=2xx.
-- Env: LT_WINDOW_S. Prints common.lua's RESULT line.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")
local req

function init(args)
  req = wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
    '{"sku":"bare","quantity":1}')
end

function request()
  if not lt.real_call() then return req end
  if not lt.in_window() then return lt.drain() end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return req
end

function response(status, headers, body)
  lt.count(status, body)
end

setup = lt.setup
done = lt.done
