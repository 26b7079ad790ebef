-- resp.lua: a small Redis client over ngx.socket.tcp (cosockets), for the OpenResty peers.
-- Debian packages lua-resty-core but not lua-resty-redis, so this is the part of it the peers
-- use: connect with a timeout, send one command (RESP arrays of bulk strings), read one reply
-- (+simple, -error, :integer, $bulk, *array), and give the connection back to nginx's
-- per-worker keepalive pool.
--
-- resp.connect(host, port, timeout_ms) -> client or nil, err
-- client:call(...) -> reply (string, number, table, or ngx.null for a nil bulk) or nil, err
--   (a Redis error reply is returned as nil, "ERR ..." / "NOSCRIPT ...")
-- client:keepalive() puts the socket back in the pool (call it only after a clean exchange)
-- client:close()
local tcp = ngx.socket.tcp
local concat, tostring, sub, tonumber = table.concat, tostring, string.sub, tonumber

local M = {}
local Client = {}
Client.__index = Client

function M.connect(host, port, timeout_ms)
  local sock = tcp()
  sock:settimeout(timeout_ms or 1000)
  local ok, err = sock:connect(host, port, { pool_size = 256 })
  if not ok then return nil, err end
  return setmetatable({ sock = sock }, Client)
end

local function read_reply(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local kind, rest = sub(line, 1, 1), sub(line, 2)
  if kind == "+" then return rest end
  if kind == "-" then return nil, rest end
  if kind == ":" then return tonumber(rest) end
  if kind == "$" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
    local data, rerr = sock:receive(n + 2)
    if not data then return nil, rerr end
    return sub(data, 1, n)
  end
  if kind == "*" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
    local out = {}
    for i = 1, n do
      local v, verr = read_reply(sock)
      if v == nil then return nil, verr end
      out[i] = v
    end
    return out
  end
  return nil, "bad reply: " .. line
end

function Client:call(...)
  local n = select("#", ...)
  local parts = { "*", n, "\r\n" }
  for i = 1, n do
    local a = tostring((select(i, ...)))
    parts[#parts + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  local ok, err = self.sock:send(concat(parts))
  if not ok then return nil, err end
  return read_reply(self.sock)
end

function Client:keepalive() return self.sock:setkeepalive(10000, 256) end
function Client:close() return self.sock:close() end

return M
