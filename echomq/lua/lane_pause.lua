--[[
  lane_pause: pause or resume a group's lane, or the whole queue (group *). A paused lane leaves
  the ring (its jobs stay in it, its leases run on) and comes back on resume, to its entry left in
  the ring if a lane claim has not dropped it yet, else to the ring's tail: O(1) in the number of
  lanes, the ring never walked (include/lanes.lua left_entries);
  a paused queue leases nothing, flat or lane (claim, settle and lane_claim lease no job), until
  resumed. A resume leaves wake tokens for the parked consumers. Scripts only: an operator's tool.
    KEYS[1] <base>ring       groups whose lanes are non-empty and not parked (list)
    KEYS[2] <base>parked     why a group is out of the ring, bit 4 paused (hash)
    KEYS[3] <base>throttled  groups over their rate (zset)
    KEYS[4] <base>turn       the ring head's claims in its turn (string)
    KEYS[5] <base>paused     present while the whole queue is paused (string)
    KEYS[6] <base>wake       wake tokens (list)
    ARGV[1] scope            a group, or * for the whole queue
    ARGV[2] paused           1 to pause, 0 to resume
  Derived: <base>lane:<group> and <base>prio:<group> of the group, then <base>ringleft (hash).
  Replies: +OK | EMQARITY, EMQLANE, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "lanes"
--- @include "wake"
if #KEYS ~= 6 or #ARGV ~= 2 then return arity_error('LANE_PAUSE', 6, 2) end
local scope = ARGV[1]
if scope ~= '*' and not lane_ok(scope) then return redis.error_reply(E_LANE) end
local base = keys_base({ 'ring', 'parked', 'throttled', 'turn', 'paused', 'wake' })
if base == nil then return redis.error_reply(E_KEYS) end
local pause = ARGV[2]
if pause ~= '0' and pause ~= '1' then
  return redis.error_reply('EMQNUM paused must be 1 (pause) or 0 (resume)')
end
if not types_ok({ 'list', 'hash', 'zset', 'string', 'string', 'list' }) then
  return redis.error_reply(E_TYPE)
end

if scope == '*' then
  if pause == '1' then
    redis.call('SET', KEYS[5], '1')
  elseif redis.call('DEL', KEYS[5]) == 1 then
    wake(KEYS[6], WAKE_CAP)
  end
  return redis.status_reply('OK')
end
local failure = check_lane_keys(base, scope) or check_ring_left(base)
if failure then return failure end
local mask = parked_mask(base, scope)
local paused = bit.band(mask, PARKED_PAUSED) ~= 0
if pause == '1' and not paused then
  set_parked(base, scope, mask + PARKED_PAUSED, nil, 'operator')
elseif pause == '0' and paused then
  set_parked(base, scope, mask - PARKED_PAUSED, nil, 'operator')
  if mask == PARKED_PAUSED and lane_nonempty(base, scope) then wake(KEYS[6], 1) end
end
return redis.status_reply('OK')
