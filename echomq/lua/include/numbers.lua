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

-- A row field a transition counts on with HINCRBY (a waiting job's `waits`): absent counts as 0;
-- nil unless an integer from 0 in canonical decimal (no leading zero), so that the caller refuses
-- the call before it writes, where HINCRBY would raise half-way or the count would be a guess.
local function count_field(v)
  if v == false then return 0 end
  local n = int_arg(v, 0)
  if n == nil or dec(n) ~= v then return nil end
  return n
end
