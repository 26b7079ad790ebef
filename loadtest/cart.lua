-- cart.lua: wrk script posting carts (SPEC §17): one order of LT_SKUS's items, LT_QTY units each.
-- Env: LT_SKUS ("c0,c1": the items, in that order; the first is the cart's home SKU), LT_QTY (1),
-- LT_USERS (0: no user; N: "user_id":"u<n>", n drawn at random per request, for an instance
-- started with --trust-body-user-id),
-- LT_MIX (0; 1: each cart a random 2-5 of LT_SKUS in a random order, 1-2 units each: carts
-- contending for overlapping SKUs), LT_WINDOW_S, LT_OK (common.lua). Prints the RESULT line of
-- common.lua, where created = carts answered 201 and units = the home item's units (a cart's
-- answer carries the home item's quantity); lines = created × items; and a line
-- "CARTUNITS <sku>=<units> ..." of the units of every SKU in the 201 answers' items.
-- Usage: wrk -s loadtest/cart.lua URL/api/v1/orders
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local lt = dofile(dir .. "common.lua")

local skus = os.getenv("LT_SKUS") or "c0,c1"
local qty = tonumber(os.getenv("LT_QTY") or "1")
local users = tonumber(os.getenv("LT_USERS") or "0")
local mix = os.getenv("LT_MIX") == "1"
local items_text
local all = {}
-- per thread: units of each SKU in 201 answers (summed by done() through thread:get)
lt_cart_units = {}

function init(args)
  local items = {}
  for s in skus:gmatch("[^,]+") do
    items[#items + 1] = string.format('{"sku":"%s","quantity":%d}', s, qty)
  end
  items_text = '"items":[' .. table.concat(items, ",") .. ']'
  for sku in skus:gmatch("[^,]+") do all[#all + 1] = sku end
end

local function mixed()
  local pick, n = {}, math.random(2, math.min(5, #all))
  for i = 1, #all do pick[i] = all[i] end
  for i = #pick, 2, -1 do
    local j = math.random(i)
    pick[i], pick[j] = pick[j], pick[i]
  end
  local items = {}
  for i = 1, n do
    items[i] = string.format('{"sku":"%s","quantity":%d}', pick[i], math.random(2))
  end
  return '"items":[' .. table.concat(items, ",") .. ']'
end

local function body()
  if mix then return "{" .. mixed() .. "}" end
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
  if status == 201 and body then
    local items = body:match('"items":(%b[])')
    for sku, q in (items or ""):gmatch('"sku":"([^"]*)","quantity":(%d+)') do
      lt_cart_units[sku] = (lt_cart_units[sku] or 0) + tonumber(q)
    end
  end
end

local threads = {}
function setup(thread)
  table.insert(threads, thread)
  lt.setup(thread)
end

function done(summary, latency, requests)
  lt.done(summary, latency, requests)
  local tot, names = {}, {}
  for _, t in ipairs(threads) do
    for sku, q in pairs(t:get("lt_cart_units") or {}) do
      if not tot[sku] then names[#names + 1] = sku end
      tot[sku] = (tot[sku] or 0) + q
    end
  end
  table.sort(names)
  local out = {}
  for _, sku in ipairs(names) do out[#out + 1] = sku .. "=" .. tot[sku] end
  io.write("CARTUNITS ", table.concat(out, " "), "\n")
end
