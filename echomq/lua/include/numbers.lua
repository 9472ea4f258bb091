-- Integers as the protocol reads and writes them.
-- An integer argument: 1..15 ASCII digits, at least min; nil otherwise.
local function int_arg(s, min)
  if #s < 1 or #s > 15 or string.find(s, '^[0-9]+$') == nil then return nil end
  local v = tonumber(s)
  if v < min then return nil end
  return v
end

-- A row field read as a count: absent or not an integer counts as the fallback.
local function int_field(v, fallback)
  if v == false then return fallback end
  return int_arg(v, 0) or fallback
end

local function dec(v)
  return string.format('%d', v)
end
