-- Redis's clock in ms, as a Lua local `now` (scripts are replicated by effects, Redis >= 5).
-- @include time_ms.lua
local now = time_ms()
