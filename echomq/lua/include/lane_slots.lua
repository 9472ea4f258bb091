-- A lane job's lease leaving active: the bookkeeping checked first, then its group's slot given
-- back.
--- @include "derived"
--- @include "errors"
--- @include "lanes"
--- @include "numbers"
--- @include "queue_limits"

-- The keys a lane job's lease touches when it leaves active (the ring, the knobs, the leases
-- held, the parked groups, and the group's lane when the group is parked at its limit: it may
-- come back to the ring if its lane holds jobs), checked as derived keys before anything is
-- written: nil, or the error reply. Nothing is checked for a flat job.
local LANE_BOOKKEEPING = { { 'ring', 'list' }, { 'laneconf', 'hash' }, { 'leased', 'hash' },
  { 'parked', 'hash' } }

-- Each row's lane (false: a flat job) as this call read it: a row's lane never changes.
local row_lanes = {}
local function lane_of(row)
  local group = row_lanes[row]
  if group == nil then
    group = redis.call('HGET', row, 'lane')
    row_lanes[row] = group
  end
  return group
end

-- The lane a settlement's one read of its row found (read_lease), kept for lane_of.
local function known_lane(row, group)
  row_lanes[row] = group
end

local function check_lane_bookkeeping(base, row)
  local held_failure = check_queue_slot(base)
  if held_failure then return held_failure end
  local group = lane_of(row)
  if not group then return nil end
  for i = 1, #LANE_BOOKKEEPING do
    local key = base .. LANE_BOOKKEEPING[i][1]
    if not may_access(key) then return redis.error_reply(E_PERM) end
    local t = derived_type(key)
    if t == nil then return redis.error_reply(E_MOVING) end
    if t ~= 'none' and t ~= LANE_BOOKKEEPING[i][2] then return redis.error_reply(E_TYPE) end
  end
  if bit.band(parked_mask(base, group), PARKED_FULL) == 0 then return nil end
  return check_lane_keys(base, group)
end

-- A lease of a lane job leaves active (acked, retried, dead, recovered, released): its group
-- holds one lease less, and comes back from its concurrency limit when below it.
local function release_lane_slot(base, row)
  release_queue_slot(base)
  local group = lane_of(row)
  if not group then return end
  local held = int_field(redis.call('HGET', base .. 'leased', group), 0) - 1
  if held <= 0 then
    redis.call('HDEL', base .. 'leased', group)
  else
    redis.call('HSET', base .. 'leased', group, dec(held))
  end
  local mask = parked_mask(base, group)
  if bit.band(mask, PARKED_FULL) == 0 then return end
  local limit = lane_knobs(base, group).concurrency
  if limit == nil or held < limit then set_parked(base, group, mask - PARKED_FULL) end
end
