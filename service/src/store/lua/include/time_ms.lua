-- time_ms(): Redis's clock in ms, as a Lua local function (scripts are replicated by effects,
-- Redis >= 5). A script that needs the time only on some paths calls it there (the commit).
local function time_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
