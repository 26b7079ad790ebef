-- A segment takes a SKU's new rules version (PATCH, after patch_rules.lua wrote it to meta):
-- its rver key is raised to it, never lowered, so a commit with older rules is refused there
-- (commit_body.lua, STORE_COMMIT_RULES) and the instance that sent it re-reads the rules.
-- The key outlives the segment's resets and drops, as the version counter does: a rules
-- version is never handed out twice (docs/design.md "The sale rules' version").
-- A damaged rver is overwritten: the version pushed is the newest there is.
-- KEYS: the segment's rver.  ARGV: the rules version.  -> the segment's rules version
-- @include int.lua
local cur = int(redis.call('GET', KEYS[1]) or '0')
if cur and cur >= tonumber(ARGV[1]) then return cur end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
