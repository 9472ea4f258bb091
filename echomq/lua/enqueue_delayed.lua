--[[
  enqueue_delayed: admit a job once, straight into delayed: it runs once promote finds it due, at
  the later of now + delay_ms and at_ms.
    KEYS[1] <base>job:<id>   the job row (hash)
    KEYS[2] <base>delayed    jobs waiting to run, score = due time (zset)
    KEYS[3] <base>wake       wake tokens (list)
    KEYS[4] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] payload          any bytes
    ARGV[3] now              ms, or * for the server clock
    ARGV[4] delay_ms         integer >= 0
    ARGV[5] at_ms            integer >= 0, an absolute due time (0: none)
    ARGV[6] priority         optional: -100 to 100, higher claimed first (0 when left off)
    ARGV[7] expires_at       optional: ms on now's clock; a claim meeting it (at or after) ends the
                             job dead with the error 'expired' (0 or left off: no deadline)
  One wake token, so a parked consumer looks again at when the next job falls due.
  Replies: +ENQUEUED | +DUPLICATE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, WRONGTYPE errors.
]]
--- @include "admit"
--- @include "args"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "numbers"
--- @include "priority"
--- @include "wake"
if #KEYS < 3 or #KEYS > 4 or #ARGV < 5 or #ARGV > 7 then
  return optional_arity_error('ENQUEUE_DELAYED', 3, 5, 7)
end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local _, events_key = optional_keys(keys_base({ 'job:' .. id, 'delayed', 'wake' }), 3, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[3])
if now == nil then return redis.error_reply(E_NOW) end
local delay_ms = int_arg(ARGV[4], 0)
if delay_ms == nil then return number_error('delay_ms', 0) end
local at_ms = int_arg(ARGV[5], 0)
if at_ms == nil then return number_error('at_ms', 0) end
local priority = optional_priority(6)
if priority == nil then return redis.error_reply(E_PRIORITY) end
local expires_at = 0
if #ARGV > 6 then expires_at = int_arg(ARGV[7], 0) end
if expires_at == nil then return number_error('expires_at', 0) end
if not types_ok({ 'hash', 'zset', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local row, delayed, wake_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end
new_row(row, ARGV[2], now, priority, nil, expiry_fields(expires_at))
redis.call('ZADD', delayed, dec(math.max(now + delay_ms, at_ms)), id)
wake(wake_key, 1)
emit(events_key, 'enqueued', id, 0, now, 'due', dec(math.max(now + delay_ms, at_ms)),
  with_priority(priority))
return redis.status_reply('ENQUEUED')
