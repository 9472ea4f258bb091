--[[
  retry: the current lease failed; record the error and run again after delay_ms, or go dead when
  the attempts are used up (the row's attempts >= max_attempts).
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>delayed    jobs waiting to run again, score = due time (zset)
    KEYS[3] <base>dead       jobs that used up their attempts, score = time of death (zset)
    KEYS[4] <base>job:<id>   the job row (hash)
    KEYS[5] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] fence            integer >= 1, the lease's fence (claim's reply)
    ARGV[3] delay_ms         integer >= 0
    ARGV[4] max_attempts     integer >= 1
    ARGV[5] error            any bytes
    ARGV[6] now              ms, or * for the server clock
  Derived: <base>ended:<id>, the job's ended key (list): a token there when it goes dead.
  A replay of a retry that went through answers what it did (DEAD or RETRYING), changing nothing.
  Replies: +RETRYING | +DEAD | +STALE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM,
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
if #KEYS < 4 or #KEYS > 5 or #ARGV ~= 6 then return arity_error('RETRY', 4, 6) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'active', 'delayed', 'dead', 'job:' .. id })
local _, events_key = optional_keys(base, 4, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local fence = int_arg(ARGV[2], 1)
if fence == nil then return number_error('fence', 1) end
local delay_ms = int_arg(ARGV[3], 0)
if delay_ms == nil then return number_error('delay_ms', 0) end
local max_attempts = int_arg(ARGV[4], 1)
if max_attempts == nil then return number_error('max_attempts', 1) end
local now = now_arg(ARGV[6])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'zset', 'zset', 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local active, delayed, dead, row = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ended = base .. 'ended:' .. id
local err = check_ended(ended)
if err then return err end
if not is_current_lease(active, row, id, fence) then
  return redis.status_reply(replayed(row, fence, ARGV[5], dead, id))
end
local failure = check_lane_bookkeeping(base, row)
if failure then return failure end
local j = new_join(base, now, events_key)
local from, to, hook_failure
if flagged(row) then
  from, to, hook_failure = plan_hook(j, id, row, 'cancelled', mark_of(row))
elseif int_field(redis.call('HGET', row, 'a'), 0) >= max_attempts then
  from, to, hook_failure = plan_hook(j, id, row, 'dead', ARGV[5])
end
if hook_failure then return hook_failure end
local verdict
if flagged(row) then
  verdict = finish_cancelled(active, row, id, ended, events_key, fence, now)
else
  verdict = finish_retry(active, delayed, dead, row, id, ARGV[5], delay_ms, max_attempts, now,
    ended, events_key, fence)
end
if from then apply_steps(j, from, to) end
return redis.status_reply(verdict)
