-- Gives units back to users: removes the entries named, each once (an entry already gone is
-- left alone, so a give-back applied twice, by two sweepers or a sweeper and a cancel, counts
-- once). A damaged user's value is skipped (and counted), never half-written.
-- KEYS: users.  ARGV: user, hex, user, hex, ...  -> {entries removed, users skipped as damaged}
-- @include user_entries.lua
local n, bad = 0, 0
for i = 1, #ARGV - 1, 2 do
  local e = entries_read(ARGV[i])
  if not e then bad = bad + 1
  elseif e[ARGV[i + 1]] then
    e[ARGV[i + 1]] = nil
    entries_write(ARGV[i], e)
    n = n + 1
  end
end
return {n, bad}
