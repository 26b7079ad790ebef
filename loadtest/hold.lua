-- hold.lua: wrk script for a SKU with holds (reservation_ttl_s > 0): posts orders of one SKU,
-- as order.lua does, and ends some of the holds it gets: of every three 201 answers, one hold
-- is confirmed (POST /api/v1/orders/{id}/confirm), one cancelled (DELETE /api/v1/orders/{id})
-- and one left to expire (the instances' sweeper). The confirm and the cancel are sent by the
-- thread's next requests, on whichever connection asks first, so most are well inside the
-- hold's TTL. They need the admin's right: the instances run with --admin-allow-loopback
-- (loadtest only). Used by loadtest/sinkfaults.sh, where every order change is logged.
-- Env: LT_SKU (sku), LT_QTY (1), LT_WINDOW_S (10), LT_OK (201).
-- Prints the RESULT line of common.lua: created = holds placed, s200 = confirms and cancels
-- that held, s409 = those that found the hold expired (or a refused order), sent_reads = the
-- confirms and cancels sent.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local sku = os.getenv("LT_SKU") or "sku"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local order_req
local todo = {} -- {path, method} of the confirms and cancels still to send, oldest first
local placed = 0

function init(args)
  order_req = wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
    string.format('{"sku":"%s","quantity":%d}', sku, qty))
end

function request()
  if not lt.real_call() then return order_req end
  if not lt.in_window() then return lt.drain() end
  local t = table.remove(todo, 1)
  if t then
    lt.c.sent_reads = lt.c.sent_reads + 1
    return wrk.format(t[2], t[1])
  end
  lt.c.sent_orders = lt.c.sent_orders + 1
  return order_req
end

function response(status, headers, body)
  lt.count(status, body)
  if status ~= 201 or not body then return end
  local id = body:match('"order_id":"([^"]+)"')
  if not id then return end
  placed = placed + 1
  if placed % 3 == 1 then
    table.insert(todo, { "/api/v1/orders/" .. id .. "/confirm", "POST" })
  elseif placed % 3 == 2 then
    table.insert(todo, { "/api/v1/orders/" .. id, "DELETE" })
  end
end

setup = lt.setup
done = lt.done
