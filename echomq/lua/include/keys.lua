-- The declared keys of a call: one queue's, in the documented order, each of its type.
--- @include "args"
local RECORD_PREFIX = 'claim:'
local EVENTS_SUFFIX = 'events'
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

-- A claim record's name: base .. 'claim:' .. a claim id of the lane gate.
local function record_key_ok(base, key)
  local prefix = base .. RECORD_PREFIX
  if #key <= #prefix or string.sub(key, 1, #prefix) ~= prefix then return false end
  return lane_ok(string.sub(key, #prefix + 1))
end

-- A declared key named by the caller: base .. prefix .. a name of the lane gate (enqueue_unique's
-- dedupe key, 'dedupe:').
local function named_key_ok(base, key, prefix)
  if base == nil then return false end
  local head = base .. prefix
  if #key <= #head or string.sub(key, 1, #head) ~= head then return false end
  return lane_ok(string.sub(key, #head + 1))
end

-- The keys a call may declare after its n own ones, in order: its claim record (takes_record;
-- any key but the events key is taken for it), then the queue's events key, exactly
-- base .. 'events'. Returns record_key, events_key (nil when not declared), or false, false
-- when a key is neither (EMQKEYS), or base is nil.
local function optional_keys(base, n, takes_record)
  if base == nil then return false, false end
  local record_key, events_key, i = nil, nil, n + 1
  if takes_record and KEYS[i] and KEYS[i] ~= base .. EVENTS_SUFFIX then
    if not record_key_ok(base, KEYS[i]) then return false, false end
    record_key, i = KEYS[i], i + 1
  end
  if KEYS[i] then
    if KEYS[i] ~= base .. EVENTS_SUFFIX then return false, false end
    events_key, i = KEYS[i], i + 1
  end
  if KEYS[i] then return false, false end
  return record_key, events_key
end

-- The events key's type, checked after every other declared key's: absent or a stream.
local function events_type_ok(key)
  local t = key_type(key)
  return t == 'none' or t == 'stream'
end
