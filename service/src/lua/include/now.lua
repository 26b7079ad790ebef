-- Redis's clock in ms, as a Lua local `now` (scripts are replicated by effects, Redis >= 5).
local lc_t = redis.call('TIME')
local now = tonumber(lc_t[1]) * 1000 + math.floor(tonumber(lc_t[2]) / 1000)
