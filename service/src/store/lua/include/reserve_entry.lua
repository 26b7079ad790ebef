-- reserve_entry(lim, head, more, entry): the step user_reserve.lua (a SKU's limit) and
-- group_reserve.lua (a limit group's) share (docs/design.md "Per-user limits", "Limit groups"),
-- over the user's entries in KEYS[1] (user_entries.lua; ARGV: user, order hex, units, bound ms,
-- margin ms), as one Lua local function:
--   this request's entry already there -> {STORE_RESERVE_OK, its expiry, now};
--   the user's units and this request's over lim -> {STORE_RESERVE_OVER, lim, held, head, then
--     for at most 8 entries: hex, expiry, past ('1'/'0'), more(v)...}, first those past their
--     commit deadline + margin or known committed (issue 29: an order that has ended, its
--     give-back still queued, or that a PUT's reset wiped, counts for nothing), then those still
--     within it (dropped only when their order is found ended), for the caller to look for
--     (user_resolve.lua settles them); more(v): the further elements of entry v (a list);
--   else entry(q, expiry) is written for this request -> {STORE_RESERVE_OK, expiry, now}.
-- An error (nothing written) when the user's entries are damaged. Needs now.lua and
-- user_entries.lua.
local function reserve_entry(lim, head, more, entry)
  local e = entries_read(ARGV[1])
  if not e then return redis.error_reply('ERR damaged: ' .. KEYS[1] .. ' entry of a user') end
  if e[ARGV[2]] then return {STORE_RESERVE_OK, e[ARGV[2]][2], now} end
  local held = 0
  for _, v in pairs(e) do held = held + v[1] end
  local q = tonumber(ARGV[3])
  if held + q > lim then
    local r, listed = {STORE_RESERVE_OVER, lim, held, head}, 0
    for pass = 1, 2 do
      for h, v in pairs(e) do
        local past = v[2] == 0 or now > v[2] + tonumber(ARGV[5])
        if (pass == 1) == past and listed < 8 then
          listed = listed + 1
          r[#r + 1] = h
          r[#r + 1] = string.format('%.0f', v[2])
          r[#r + 1] = past and '1' or '0'
          for _, x in ipairs(more(v)) do r[#r + 1] = x end
        end
      end
    end
    return r
  end
  local exp = now + tonumber(ARGV[4])
  e[ARGV[2]] = entry(q, exp)
  entries_write(ARGV[1], e)
  return {STORE_RESERVE_OK, exp, now}
end
