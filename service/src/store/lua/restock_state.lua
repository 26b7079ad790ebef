-- Where restock rid stands, exactly (whatever the number of restocks pending; both keys are
-- the SKU's, one slot). KEYS: rst, rres.  ARGV: rid.
-- -> one of STORE_RESTOCK_* (store_scripts.h)
if redis.call('EXISTS', KEYS[2]) == 1 then return STORE_RESTOCK_DONE end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return STORE_RESTOCK_PENDING
end
return STORE_RESTOCK_GONE
