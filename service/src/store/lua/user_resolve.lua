-- Settles entries of a user whose commit deadline has passed, as the caller found their orders
-- in the segments: each (hex, expiry seen, verdict) is applied only if the entry still has that
-- expiry (else someone changed it meanwhile): verdict "1" the order is live (the entry stays,
-- known committed: expiry 0), "0" it never committed or has ended (the entry goes).
-- KEYS: users.  ARGV: user, then hex, expiry, verdict, ...  -> entries changed
-- @include user_entries.lua
local e = entries_read(ARGV[1])
if not e then return redis.error_reply('ERR damaged: ' .. KEYS[1] .. ' entry of a user') end
local n = 0
for i = 2, #ARGV - 2, 3 do
  local v = e[ARGV[i]]
  if v and string.format('%.0f', v[2]) == ARGV[i + 1] then
    if ARGV[i + 2] == '0' then e[ARGV[i]] = nil else v[2] = 0 end
    n = n + 1
  end
end
if n > 0 then entries_write(ARGV[1], e) end
return n
