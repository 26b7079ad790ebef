-- The next value of a version counter or restock id that a failover cannot make go back: one
-- more than the counter, but at least Redis's clock in microseconds (< 2^53: exact in Lua). A
-- counter lost with its master (the promoted replica had not received the last increments)
-- would hand out a version or restock id already used on the segments (other masters), and
-- the PUT or restock would be a silent no-op there. The clock has moved past every id given
-- out before the failover: ids given faster than one per microsecond run ahead of it by their
-- count at most, which a failover's seconds absorb (the nodes' clocks must agree to within the
-- failover's time). Sets Lua local `nid` from the previous value `prev` (a number).
local id_t = redis.call('TIME')
local nid = math.max(prev + 1, tonumber(id_t[1]) * 1000000 + tonumber(id_t[2]))
