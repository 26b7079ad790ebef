-- KEYS: claim.  ARGV: expected value, new value ("" deletes).
-- -> one of STORE_SWAP_* (store_scripts.h)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return STORE_SWAP_NOT_OURS
end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') end
return STORE_SWAP_DONE
