-- KEYS: meta, rst.  ARGV: the sale rules' meta fields (rules_table.h, in its order).
-- -> {version, segments, stock, state, hwm, {rid, "v:units", ...}, rver, the rules' values in
-- ARGV's order, holds} ("" for a missing field: a layout written before state/stock/hwm or the
-- sale rules (rules.h) or their version existed is complete; holds: the hold flag, "1", "l" or
-- "0", docs/design.md "The sweeper", "" in a layout written before it). An error when a number
-- of meta or of a pending restock (rid, version, units) is damaged: every settle and every
-- answer built on it would act on a number Redis does not hold.
-- @include int.lua
-- @include layout_fields.lua
return layout_fields(KEYS[1], KEYS[2], ARGV)
