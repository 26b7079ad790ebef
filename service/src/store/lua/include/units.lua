-- units(o): an order record's units in its own segment (docs/design.md "Orders larger than one
-- segment"): a multi-segment order's primary holds the part whose segment is the record's
-- own; any other record (a one-segment order, a part) holds its quantity. nil when the record
-- does not say (a damaged record: the caller refuses it).
local function units(o)
  if type(o.parts) ~= 'table' then return tonumber(o.quantity) end
  for _, p in ipairs(o.parts) do
    if type(p) == 'table' and tonumber(p.segment) ~= nil and
       tonumber(p.segment) == tonumber(o.segment) then
      return tonumber(p.quantity)
    end
  end
  return nil
end
