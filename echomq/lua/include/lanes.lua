-- The lane state: the ring, each group's knobs and why it is parked.
--- @include "derived"
--- @include "keys"
--- @include "numbers"
--- @include "priority"

-- Lanes' limits. A group whose lane is non-empty is in the ring once unless it is parked:
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

-- A group's jobs wait in two keys: <base>lane:<group>, the list of its priority-0 jobs (oldest at
-- the head), and <base>prio:<group>, the zset of its others, scored pending_score(p, t).
-- A group's lane holds jobs, in either key (a key of another type holds none: it is not touched).
local function lane_nonempty(base, group)
  local lane_key, prio_key = base .. 'lane:' .. group, base .. 'prio:' .. group
  return (key_type(lane_key) == 'list' and redis.call('LLEN', lane_key) > 0)
    or (key_type(prio_key) == 'zset' and redis.call('ZCARD', prio_key) > 0)
end

-- A group's lane holds no job, its two keys checked (absent or of their types) already.
local function lane_empty(base, group)
  return redis.call('LLEN', base .. 'lane:' .. group) == 0
    and redis.call('ZCARD', base .. 'prio:' .. group) == 0
end

-- The ring's head group leaves the ring; its turn ends.
local function ring_drop_head(base)
  redis.call('LPOP', base .. 'ring')
  redis.call('DEL', base .. 'turn')
end

-- Entries a group left behind in the ring. A group leaves the ring without walking it (LREM is
-- O(ring)): its entry stays where it is, counted in <base>ringleft (per group; absent or not an
-- integer: 0). A group's left entries always come before its live one, so the first `left`
-- entries of a group met from the ring's head are left ones: a lane claim that meets one at the
-- head drops it and counts it off, serving nothing; an operator's resume takes the last one back.
local function left_entries(base, group)
  return int_field(redis.call('HGET', base .. 'ringleft', group), 0)
end

local function set_left_entries(base, group, n)
  if n > 0 then
    redis.call('HSET', base .. 'ringleft', group, dec(n))
  else
    redis.call('HDEL', base .. 'ringleft', group)
  end
end

-- The group leaves the ring, O(1): its live entry becomes a left one.
local function leave_ring(base, group)
  set_left_entries(base, group, left_entries(base, group) + 1)
end

-- The group comes back to the ring, O(1): its last left entry, where it stands, when it has one
-- (lane pause and lane set, scripts only), else a new entry at the tail.
local function rejoin_ring(base, group)
  local left = left_entries(base, group)
  if left > 0 then
    set_left_entries(base, group, left - 1)
  else
    redis.call('RPUSH', base .. 'ring', group)
  end
end

-- <base>ringleft checked as a derived key (ACL, slot, a hash or absent): nil, or the error reply.
local function check_ring_left(base)
  return check_derived(base .. 'ringleft', 'hash')
end

-- Set a group's parked bits (0: not parked) and keep the ring true to them: a non-empty lane
-- joins the ring's tail when it is no longer parked, and leaves it when it becomes parked. how:
-- nil (the flat transitions' bookkeeping: a join is a new entry at the tail; they never park),
-- 'popped' (lane claim popped it from the head already), 'operator' (lane pause and lane set,
-- which check <base>ringleft first: a leave is leave_ring, a join rejoin_ring).
local function set_parked(base, group, mask, opens, how)
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
    if how == 'operator' then rejoin_ring(base, group) else redis.call('RPUSH', base .. 'ring', group) end
  elseif was == 0 and mask ~= 0 and how == 'operator' then
    leave_ring(base, group)
    local turn = redis.call('GET', base .. 'turn')
    if turn and string.match(turn, '^%d+ (.*)$') == group then redis.call('DEL', base .. 'turn') end
  end
end

-- Put a job back into its lane, the group joining the ring if the lane was empty and the group is
-- not parked: a priority-0 job at the list's head or tail (command), another in the prio zset at
-- pending_score(move.priority, move.at).
local function push_lane(ring, move, command)
  local base = string.sub(ring, 1, -5)
  if lane_empty(base, move.lane) and redis.call('HGET', base .. 'parked', move.lane) == false then
    redis.call('RPUSH', ring, move.lane)
  end
  if (move.priority or 0) ~= 0 then
    redis.call('ZADD', base .. 'prio:' .. move.lane, dec(pending_score(move.priority, move.at)),
      move.id)
  else
    redis.call(command, move.lane_key, move.id)
  end
end

-- A group's two lane keys checked as derived keys (ACL, slot, a list and a zset, or absent):
-- nil, or the error reply.
local function check_lane_keys(base, group)
  return check_derived(base .. 'lane:' .. group, 'list')
    or check_derived(base .. 'prio:' .. group, 'zset')
end
