-- The declared keys of a call: one queue's, in the documented order, each of its type.
-- The base of the queue if KEYS are base..suffixes[i] in order, else nil.
local function keys_base(suffixes)
  local first, suffix = KEYS[1], suffixes[1]
  local n, m = #first, #suffix
  if n < m or string.sub(first, n - m + 1) ~= suffix then return nil end
  local base = string.sub(first, 1, n - m)
  for i = 2, #suffixes do
    if KEYS[i] ~= base .. suffixes[i] then return nil end
  end
  return base
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

-- True when every declared key is absent or of its expected type.
local function types_ok(expected)
  for i = 1, #expected do
    local t = key_type(KEYS[i])
    if t ~= 'none' and t ~= expected[i] then return false end
  end
  return true
end
