-- peer.lua: what the two OpenResty peers share: their settings (nginx variables set in
-- nginx.conf.template), the request body check, the JSON answers and the Redis connection.
local cjson = require("cjson.safe")
local resp = require("resp")

local M = {}

function M.settings()
  return {
    host = ngx.var.peer_redis_host,
    port = tonumber(ngx.var.peer_redis_port),
    segments = tonumber(ngx.var.peer_segments),
    lock_ttl = tonumber(ngx.var.peer_lock_ttl_ms),
    deadline_s = tonumber(ngx.var.peer_deadline_ms) / 1000,
  }
end

function M.reply(status, body, headers)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  for k, v in pairs(headers or {}) do ngx.header[k] = v end
  ngx.print(cjson.encode(body))
  return ngx.exit(status)
end

function M.fail(status, code, message, headers)
  return M.reply(status, { error = code, message = message }, headers)
end

-- The order's sku and quantity, or a 400 answer.
function M.read_order()
  ngx.req.read_body()
  local body = cjson.decode(ngx.req.get_body_data() or "")
  if type(body) ~= "table" then return M.fail(400, "bad_request", "body is not a JSON object") end
  local sku, qty = body.sku, body.quantity or 1
  if type(sku) ~= "string" or #sku < 1 or #sku > 64 or type(qty) ~= "number" or qty % 1 ~= 0
      or qty < 1 or qty > 1000 then
    return M.fail(400, "bad_request", "sku 1..64 characters, quantity 1..1000")
  end
  return sku, qty
end

function M.key(sku, kind, k) return "peer:{" .. sku .. "}:" .. kind .. ":" .. k end
function M.orders_key(sku) return "peer:{" .. sku .. "}:orders" end

-- 16 random bytes as hex: lock tokens and order ids (math.random, seeded per worker in
-- init_worker_by_lua: Debian has no lua-resty-string, whose resty.random teams would use).
function M.random_hex()
  local t = {}
  for i = 1, 16 do t[i] = string.format("%02x", math.random(0, 255)) end
  return table.concat(t)
end

function M.order(sku, qty, k)
  local now = ngx.now()
  return {
    order_id = M.random_hex() .. "-" .. k, sku = sku, quantity = qty, segment = k,
    created_at = os.date("!%Y-%m-%dT%H:%M:%S", math.floor(now))
      .. string.format(".%03dZ", math.floor(now * 1000) % 1000),
    status = "created",
  }
end

M.encode = cjson.encode

function M.connect(s)
  local red, err = resp.connect(s.host, s.port, 1000)
  if not red then return M.fail(503, "unavailable", "redis: " .. tostring(err)) end
  return red
end

-- EVALSHA with the EVAL fallback on NOSCRIPT.
function M.evalsha(red, sha, script, ...)
  local res, err = red:call("EVALSHA", sha, ...)
  if res == nil and err and err:find("^NOSCRIPT") then res, err = red:call("EVAL", script, ...) end
  return res, err
end

function M.sha1_hex(s)
  return (ngx.sha1_bin(s):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

return M
