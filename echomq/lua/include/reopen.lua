-- Groups over their rate whose window has opened come back (promote, lane_claim).
--- @include "derived"
--- @include "lanes"
--- @include "numbers"

-- The keys promote reads and writes for the groups it reopens and the lane jobs it moves (the
-- groups over their rate, the parked groups), checked as derived keys before anything is written:
-- nil, or the error reply.
local function check_reopening(base)
  return check_derived(base .. 'throttled', 'zset') or check_derived(base .. 'parked', 'hash')
end

-- The groups whose rate window has opened by now (at most limit), each lane key checked; nil and
-- the error reply when one cannot be touched. Promote calls it before it writes anything.
local function due_lanes(base, now, limit)
  local due = redis.call('ZRANGEBYSCORE', base .. 'throttled', '-inf', dec(now), 'LIMIT', '0',
    dec(limit))
  for i = 1, #due do
    local failure = check_lane_keys(base, due[i])
    if failure then return nil, failure end
  end
  return due
end

-- The groups of due_lanes come back: each leaves throttled and loses its rate bit. How many.
local function reopen_lanes(base, due)
  for i = 1, #due do
    redis.call('ZREM', base .. 'throttled', due[i])
    local mask = parked_mask(base, due[i])
    if bit.band(mask, PARKED_RATE) ~= 0 then set_parked(base, due[i], mask - PARKED_RATE) end
  end
  return #due
end
