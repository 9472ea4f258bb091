--[[
  cancel: a job waiting to run (pending, delayed, or in its lane) leaves its set and becomes a
  cancelled tombstone; a leased one is flagged, and a notice on <base>cancels wakes its holder (a
  consumer blocked reading it while it runs jobs; else its next heartbeat or settlement tells it);
  its settlement ends it as cancelled.
    KEYS[1] <base>job:<id>   the job row (hash)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>delayed    jobs waiting to run again (zset)
    KEYS[4] <base>active     leased jobs (zset)
    KEYS[5] <base>dead       dead jobs (zset)
    KEYS[6] <base>ring       groups whose lanes hold jobs (list)
    KEYS[7] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] now              ms, or * for the server clock
    ARGV[3] retention_ms     integer >= 0, how long the tombstone stays (0: the row is deleted)
  Derived: <base>ended:<id>, the job's ended key (list); a lane job's <base>lane:<group> (list)
  and <base>prio:<group> (zset), then <base>parked and <base>ringleft (hashes); a lease flagged
  now, <base>cancels (stream), checked in its branch.
  Replies: +CANCELLED | +CANCELLING | +DONE | +DEAD | +UNKNOWN | EMQARITY, EMQKIND, EMQKEYS,
  EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "cancelled"
--- @include "dependents"
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "lanes"
--- @include "numbers"
--- @include "rows"
if #KEYS < 6 or #KEYS > 7 or #ARGV ~= 3 then return arity_error('CANCEL', 6, 3) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'job:' .. id, 'pending', 'delayed', 'active', 'dead', 'ring' })
local _, events_key = optional_keys(base, 6, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
local retention_ms = int_arg(ARGV[3], 0)
if retention_ms == nil then return number_error('retention_ms', 0) end
if not types_ok({ 'hash', 'zset', 'zset', 'zset', 'zset', 'list' }) then
  return redis.error_reply(E_TYPE)
end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local row, pending, delayed, active, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ended = base .. 'ended:' .. id
local err = check_ended(ended)
if err then return err end
local exists = redis.call('EXISTS', row) == 1
local group = exists and redis.call('HGET', row, 'lane') or false
local lane = group and base .. 'lane:' .. group
if lane then
  err = check_lane_keys(base, group) or check_derived(base .. 'parked', 'hash')
    or check_ring_left(base)
  if err then return err end
end

if not exists then return redis.status_reply('UNKNOWN') end
if redis.call('ZSCORE', dead, id) ~= false then return redis.status_reply('DEAD') end
if not has_payload(row) then
  if redis.call('HEXISTS', row, 'cancelled') == 1 then return redis.status_reply('CANCELLED') end
  return redis.status_reply('DONE')
end
if redis.call('ZSCORE', active, id) ~= false then
  if redis.call('HEXISTS', row, 'cancel') == 0 then
    -- flagged now: its holder is woken by a notice on <base>cancels (checked before it writes)
    local notices = base .. 'cancels'
    err = check_derived(notices, 'stream')
    if err then return err end
    mark_cancel(row, retention_ms, now)
    notify_holder(notices, id, row)
  end
  return redis.status_reply('CANCELLING')
end
-- The job ends now: a waiting one (its row counts waits) leaves <base>waiting too, and the end
-- hook runs (include/dependents.lua), planned before anything is written.
local waits = redis.call('HEXISTS', row, 'waits') == 1
if waits then
  err = check_derived(base .. 'waiting', 'zset')
  if err then return err end
end
local j = new_join(base, now, events_key)
-- The job ends here: a cycle of dependents that leads back to it finds it ending, not waiting.
j.state[id] = { row = row, waiting = false }
local from, to, hook_failure = plan_hook(j, id, row, 'cancelled', { retention_ms, now })
if hook_failure then return hook_failure end
redis.call('ZREM', pending, id)
redis.call('ZREM', delayed, id)
if waits then
  redis.call('ZREM', base .. 'waiting', id)
  redis.call('HDEL', row, 'waits', 'hold')
end
if lane then
  redis.call('LREM', lane, 0, id)
  redis.call('ZREM', base .. 'prio:' .. group, id)
  -- a lane left empty leaves the ring (its entry left behind, the ring not walked), so the group
  -- joins it once when its lane fills again; a parked group is out of it already
  if lane_empty(base, group) and redis.call('HGET', base .. 'parked', group) == false then
    leave_ring(base, group)
  end
end
local attempt = attempts_of(events_key, row)
if retention_ms > 0 then mark_cancel(row, retention_ms, now) end
bury_cancelled(row, ended, retention_ms)
emit(events_key, 'cancelled', id, attempt, now)
apply_steps(j, from, to)
return redis.status_reply('CANCELLED')
