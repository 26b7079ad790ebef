-- iso(ms): Redis ms since the epoch as RFC 3339 UTC with milliseconds, "2026-11-25T18:00:00.000Z"
-- (the days-to-civil-date arithmetic of H. Hinnant's chrono algorithms; Redis's Lua has no os.date).
local function iso(ms)
  local s = math.floor(ms / 1000)
  local z = math.floor(s / 86400) + 719468
  local sod = s % 86400
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                          - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d, math.floor(sod / 3600),
                       math.floor(sod % 3600 / 60), sod % 60, ms % 1000)
end
