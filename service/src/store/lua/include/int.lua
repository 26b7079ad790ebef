-- The one number check of every script, as a Lua local function: int(v) is v as a number when
-- v is a string Redis's INCRBY/HINCRBY/DECRBY take as an integer (decimal digits, an optional
-- '-', no leading zero, no space, no '+', no fraction, no exponent) of at most 18 characters, so
-- that no increment of ours can overflow it and Lua compares it exactly enough; else nil.
-- damaged(key) is the error a script returns, before its first write, for a number that is not
-- one (it names the key, for the operator who repairs it by hand).
local function int(v)
  if type(v) ~= 'string' or #v > 18 then return nil end
  if v ~= '0' and not string.find(v, '^%-?[1-9]%d*$') then return nil end
  return tonumber(v)
end
local function damaged(key)
  return redis.error_reply('ERR damaged: ' .. key .. ' holds a number that is not an integer')
end
