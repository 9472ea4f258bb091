--[[
  lane_enqueue: admit a job once into its group's lane, at priority 0 to the tail of its list,
  else into its prio zset at pending_score(priority, now); the group joins the ring's tail when its
  lane (both keys) becomes non-empty. Scripts only: no native twin.
    KEYS[1] <base>job:<id>         the job row (hash)
    KEYS[2] <base>lane:<group>     the group's lane, oldest at the head (list)
    KEYS[3] <base>ring             groups whose lanes are non-empty (list)
    KEYS[4] <base>wake             wake tokens (list)
    KEYS[5] <base>events           optional: the queue's events (stream), the last key
    ARGV[1] id                     JOB:<rest>
    ARGV[2] payload                any bytes
    ARGV[3] group                  1..200 bytes of [A-Za-z0-9._:-]
    ARGV[4] now                    ms, or * for the server clock
    ARGV[5] priority               optional: -100 to 100, higher claimed first (0 when left off)
  Derived: <base>parked (the group may be parked) and <base>prio:<group> (the group's other jobs:
  the group joins the ring only when both its keys are empty), checked before anything is written.
  Replies: +ENQUEUED | +DUPLICATE | EMQARITY, EMQKIND, EMQLANE, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM,
  TRYAGAIN errors.
]]
--- @include "admit"
--- @include "args"
--- @include "derived"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "lanes"
--- @include "priority"
--- @include "wake"
if #KEYS < 4 or #KEYS > 5 or #ARGV < 4 or #ARGV > 5 then
  return optional_arity_error('LANE_ENQUEUE', 4, 4, 5)
end
local id, group = ARGV[1], ARGV[3]
if not id_ok(id) then return redis.error_reply(E_KIND) end
if not lane_ok(group) then return redis.error_reply(E_LANE) end
local base = keys_base({ 'job:' .. id, 'lane:' .. group, 'ring', 'wake' })
local _, events_key = optional_keys(base, 4, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[4])
if now == nil then return redis.error_reply(E_NOW) end
local priority = optional_priority(5)
if priority == nil then return redis.error_reply(E_PRIORITY) end
if not types_ok({ 'hash', 'list', 'list', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local row, lane_key, ring, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end
-- The group may be parked: read before the job's group joins the ring, checked before any write.
local failure = check_derived(base .. 'parked', 'hash')
  or check_derived(base .. 'prio:' .. group, 'zset')
if failure then return failure end
new_row(row, ARGV[2], now, priority, group)
push_lane(ring, { id = id, lane = group, lane_key = lane_key, priority = priority, at = now },
  'RPUSH')
wake(wake_key, 1)
emit(events_key, 'enqueued', id, 0, now, 'lane', group, with_priority(priority))
return redis.status_reply('ENQUEUED')
