-- A user's entries in the SKU's per-user hash (field: the user id; the key is KEYS[1] unless
-- the call names another, as the commit does), as Lua local functions: entries_read(user[, key]) -> a table order-hex -> {units, expiry, segment} (expiry: Redis
-- ms until which the order may still commit, 0 once it is known to have committed; segment -1
-- until then; the commit's check on one Redis writes its segment), or nil when the value is not
-- what these scripts write; entries_write(user, e[, key]) stores it (no entry left: the field goes). docs/design.md "Per-user limits".
local function entries_read(user, key)
  local raw = redis.call('HGET', key or KEYS[1], user)
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
local function entries_write(user, e, key)
  if next(e) == nil then redis.call('HDEL', key or KEYS[1], user)
  else redis.call('HSET', key or KEYS[1], user, cjson.encode(e)) end
end
