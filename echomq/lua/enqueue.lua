--[[
  enqueue: admit a job once.
    KEYS[1] <base>job:<id>   the job row (hash)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>wake       wake tokens (list)
    KEYS[4] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] payload          any bytes
    ARGV[3] now              ms, or * for the server clock
    ARGV[4] priority         optional: -100 to 100, higher claimed first (0 when left off)
    ARGV[5] expires_at       optional: ms on now's clock; a claim meeting it (at or after) ends the
                             job dead with the error 'expired' (0 or left off: no deadline)
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
if #KEYS < 3 or #KEYS > 4 or #ARGV < 3 or #ARGV > 5 then
  return optional_arity_error('ENQUEUE', 3, 3, 5)
end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local _, events_key = optional_keys(keys_base({ 'job:' .. id, 'pending', 'wake' }), 3, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[3])
if now == nil then return redis.error_reply(E_NOW) end
local priority = optional_priority(4)
if priority == nil then return redis.error_reply(E_PRIORITY) end
local expires_at = 0
if #ARGV > 4 then expires_at = int_arg(ARGV[5], 0) end
if expires_at == nil then return number_error('expires_at', 0) end
if not types_ok({ 'hash', 'zset', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local row, pending, wake_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end
new_row(row, ARGV[2], now, priority, nil, expiry_fields(expires_at))
redis.call('ZADD', pending, dec(pending_score(priority, now)), id)
wake(wake_key, 1)
emit(events_key, 'enqueued', id, 0, now, with_priority(priority))
return redis.status_reply('ENQUEUED')
