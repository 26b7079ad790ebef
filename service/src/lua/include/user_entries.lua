-- A user's entries in the SKU's per-user hash (KEYS[1], field: the user id), as Lua local
-- functions: entries_read(user) -> a table order-hex -> {units, expiry, segment} (expiry: Redis
-- ms until which the order may still commit, 0 once it is known to have committed; segment -1
-- until then), or nil when the value is not what these scripts write; entries_write(user, e)
-- stores it (no entry left: the field goes). docs/design.md "Per-user limits".
local function entries_read(user)
  local raw = redis.call('HGET', KEYS[1], user)
  if not raw then return {} end
  local ok, e = pcall(cjson.decode, raw)
  if not ok or type(e) ~= 'table' then return nil end
  for h, v in pairs(e) do
    if type(h) ~= 'string' or type(v) ~= 'table' or type(v[1]) ~= 'number' or
       type(v[2]) ~= 'number' or type(v[3]) ~= 'number' then
      return nil
    end
  end
  return e
end
local function entries_write(user, e)
  if next(e) == nil then redis.call('HDEL', KEYS[1], user)
  else redis.call('HSET', KEYS[1], user, cjson.encode(e)) end
end
