-- The lane state: the ring, each group's knobs and why it is parked.
--- @include "keys"
--- @include "numbers"

-- Lanes' limits. A group whose lane is non-empty is in the ring exactly once unless it is parked:
-- <base>parked holds, per group, why it is out of the ring (bits: at its concurrency limit, over
-- its rate until its window opens, paused). Knobs live in <base>laneconf: `<knob>` is the queue's
-- default, `<knob>:<group>` a group's override. <base>leased counts each group's leases held,
-- <base>windows each rate-limited group's window ('<start> <claims>'), <base>throttled when each
-- window over its rate opens, <base>turn how often the ring's head was served in its turn.
local PARKED_FULL, PARKED_RATE, PARKED_PAUSED = 1, 2, 4
local DEFAULT_WINDOW_MS = 1000

local KNOBS = { 'concurrency', 'rate', 'window_ms', 'weight' }
local KNOB_FALLBACK = { window_ms = DEFAULT_WINDOW_MS, weight = 1 }

-- A group's knobs as they apply: its own, else the queue's default; absent (or not an integer
-- from 1): no limit (nil), a window of 1000 ms, a weight of 1. (HGET, not HMGET: the commands a
-- script runs must be allowed to its user, and HGET already is.)
local function lane_knobs(base, group)
  local conf, knobs = base .. 'laneconf', {}
  for i = 1, #KNOBS do
    local v = redis.call('HGET', conf, KNOBS[i] .. ':' .. group)
    if v == false then v = redis.call('HGET', conf, KNOBS[i]) end
    knobs[KNOBS[i]] = (v and int_arg(v, 1)) or KNOB_FALLBACK[KNOBS[i]]
  end
  return knobs
end

local function parked_mask(base, group)
  return int_field(redis.call('HGET', base .. 'parked', group), 0)
end

-- A group's lane holds jobs (a lane key of another type holds none: it is not touched).
local function lane_nonempty(base, group)
  local lane_key = base .. 'lane:' .. group
  return key_type(lane_key) == 'list' and redis.call('LLEN', lane_key) > 0
end

-- The ring's head group leaves the ring; its turn ends.
local function ring_drop_head(base)
  redis.call('LPOP', base .. 'ring')
  redis.call('DEL', base .. 'turn')
end

-- Set a group's parked bits (0: not parked) and keep the ring true to them: a non-empty lane
-- joins the ring's tail when it is no longer parked, and leaves it (LREM) when it becomes
-- parked unless leave_ring is false (the caller popped it from the head already).
local function set_parked(base, group, mask, opens, leave_ring)
  local was = parked_mask(base, group)
  if mask == 0 then
    redis.call('HDEL', base .. 'parked', group)
  else
    redis.call('HSET', base .. 'parked', group, dec(mask))
  end
  if bit.band(mask, PARKED_RATE) ~= 0 and opens then
    redis.call('ZADD', base .. 'throttled', dec(opens), group)
  elseif bit.band(mask, PARKED_RATE) == 0 and bit.band(was, PARKED_RATE) ~= 0 then
    redis.call('ZREM', base .. 'throttled', group)
  end
  if not lane_nonempty(base, group) then return end
  if was ~= 0 and mask == 0 then
    redis.call('RPUSH', base .. 'ring', group)
  elseif was == 0 and mask ~= 0 and leave_ring ~= false then
    redis.call('LREM', base .. 'ring', 0, group)
    local turn = redis.call('GET', base .. 'turn')
    if turn and string.match(turn, '^%d+ (.*)$') == group then redis.call('DEL', base .. 'turn') end
  end
end

-- Put a job back into its lane (at the head or the tail), the group joining the ring if the lane
-- was empty and the group is not parked.
local function push_lane(ring, move, command)
  if redis.call('LLEN', move.lane_key) == 0 then
    local base = string.sub(ring, 1, -5)
    if redis.call('HGET', base .. 'parked', move.lane) == false then
      redis.call('RPUSH', ring, move.lane)
    end
  end
  redis.call(command, move.lane_key, move.id)
end
