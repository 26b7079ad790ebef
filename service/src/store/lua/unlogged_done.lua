-- inventory-sink: after writing a segment's order records into the database, takes the n order
-- changes it found counted without a log entry (cnt's u: commit_body.lua, hold_end.lua) off the
-- count, if the segment is still at the version it read (a PUT since reset cnt: its u counts
-- the new layout's changes, left for the next round).
-- KEYS: cnt, sver.  ARGV: n, sver as read.  -> 1 taken, 0 left
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[2] then return 0 end
local u = tonumber(redis.call('HGET', KEYS[1], 'u') or '0') or 0
if u <= 0 then return 0 end
if u <= tonumber(ARGV[1]) then
  redis.call('HDEL', KEYS[1], 'u')
else
  redis.call('HINCRBY', KEYS[1], 'u', -tonumber(ARGV[1]))
end
return 1
