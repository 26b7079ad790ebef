-- The waiting room's rules of a SKU, read from its meta before a gate script's first write
-- (after int.lua): the caller sets `meta_key` (the meta's key) and `gf` (the ARGV position of the
-- first of the seven meta field names gate_store.c passes, rules_table.h's meta column: queue_rate,
-- queue_max_active, queue_ticket_ttl_s, queue_admit_pct, queue_fifo, queue_paused, sale_start).
-- Ends the script with {STORE_GATE_NO_SKU} for a SKU that is not there (no meta, or deleted: 0
-- segments), {STORE_GATE_NO_ROOM} when its queue_rate is 0, an error naming the meta when a
-- number is damaged. Sets the locals q_rate, q_active, q_ttl (seconds, 0 made the default),
-- q_pct (k in percent, 0 made the default), q_fifo, q_paused and sale_start (ms, 0 none).
local gm = redis.call('HMGET', meta_key, 'segments', ARGV[gf], ARGV[gf + 1], ARGV[gf + 2],
                      ARGV[gf + 3], ARGV[gf + 4], ARGV[gf + 5], ARGV[gf + 6])
local gsegs = int(gm[1] or '0')
if not gsegs then return damaged(meta_key) end
if gsegs <= 0 then return {STORE_GATE_NO_SKU} end
local q_rate, q_active, q_ttl = int(gm[2] or '0'), int(gm[3] or '0'), int(gm[4] or '0')
local q_pct, q_fifo, q_paused = int(gm[5] or '0'), int(gm[6] or '0'), int(gm[7] or '0')
local sale_start = int(gm[8] or '0')
if not q_rate or not q_active or not q_ttl or not q_pct or not q_fifo or not q_paused or
   not sale_start or q_rate < 0 or q_active < 0 or q_ttl < 0 or q_pct < 0 then
  return damaged(meta_key)
end
if q_rate == 0 then return {STORE_GATE_NO_ROOM} end
if q_ttl == 0 then q_ttl = STORE_GATE_TTL_DEFAULT_S end
if q_pct == 0 then q_pct = STORE_GATE_PCT_DEFAULT end
