--[[
  ack_result: complete the current lease as ack does, keeping the handler's result in the
  tombstone (the row's result field) in the same step; with a tombstone kept, the job's ended
  key gets a token (expiring with the tombstone) that wakes its waiters.
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>job:<id>   the job row (hash)
    KEYS[3] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] fence            integer >= 1, the lease's fence (claim's reply)
    ARGV[3] retention_ms     integer >= 0 (0: the row is deleted, the result with it)
    ARGV[4] result           any bytes, at most 524288
  Derived: <base>ended:<id>, the job's ended key (list).
  A replay of an ack that went through (the tombstone keeps the fence) answers ACKED, changing
  nothing.
  Replies: +ACKED | +STALE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, EMQSIZE, WRONGTYPE, NOPERM,
  TRYAGAIN errors.
]]
--- @include "args"
--- @include "dependents"
--- @include "ended"
--- @include "errors"
--- @include "keys"
--- @include "lane_slots"
--- @include "leases"
--- @include "numbers"
--- @include "settlements"
if #KEYS < 2 or #KEYS > 3 or #ARGV ~= 4 then return arity_error('ACK_RESULT', 2, 4) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'active', 'job:' .. id })
local _, events_key = optional_keys(base, 2, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local fence = int_arg(ARGV[2], 1)
if fence == nil then return number_error('fence', 1) end
local retention_ms = int_arg(ARGV[3], 0)
if retention_ms == nil then return number_error('retention_ms', 0) end
if not result_ok(ARGV[4]) then return redis.error_reply(E_RESULT) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local active, row, ended = KEYS[1], KEYS[2], base .. 'ended:' .. id
local err = check_ended(ended)
if err then return err end
local r = read_lease(row)
local cancelled = r.cancel ~= false
if not is_lease_read(active, id, fence, r) then
  return redis.status_reply(replayed(row, fence))
end
known_lane(row, r.lane)
local failure = check_lane_bookkeeping(base, row)
if failure then return failure end
local j = new_join(base, nil, events_key)
local from, to, hook_failure
if cancelled then
  from, to, hook_failure = plan_hook(j, id, row, 'cancelled', mark_of(row), r)
else
  from, to, hook_failure = plan_hook(j, id, row, 'done', nil, r)
end
if hook_failure then return hook_failure end
local verdict
if cancelled then
  verdict = finish_cancelled(active, row, id, ended, events_key, fence)
else
  verdict = finish_ack(active, row, id, retention_ms, ARGV[4], ended, events_key,
  fence)
end
apply_steps(j, from, to)
return redis.status_reply(verdict)
