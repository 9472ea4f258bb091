--[[
  enqueue_after: admit a job once, to wait for its parents (after.lua registers them and seals).
    KEYS[1] <base>waiting    jobs waiting for their parents (zset)
    KEYS[2] <base>job:<id>   the job row (hash)
    KEYS[3] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] payload          any bytes
    ARGV[3] now              ms, or * for the server clock
    ARGV[4] policy           fail, ignore or continue: what a parent's death does to the job
    ARGV[5] priority         optional: -100 to 100, higher claimed first (0 when left off)
  The row is an enqueue's with waits 1 and hold 1 (open for more parents) and policy unless fail.
  Replies: +WAITING | +DUPLICATE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, EMQPOLICY, WRONGTYPE errors.
]]
--- @include "admit"
--- @include "args"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "numbers"
--- @include "priority"
if #KEYS < 2 or #KEYS > 3 or #ARGV < 4 or #ARGV > 5 then
  return optional_arity_error('ENQUEUE_AFTER', 2, 4, 5)
end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local _, events_key = optional_keys(keys_base({ 'waiting', 'job:' .. id }), 2, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[3])
if now == nil then return redis.error_reply(E_NOW) end
local policy = ARGV[4]
if policy ~= 'fail' and policy ~= 'ignore' and policy ~= 'continue' then
  return redis.error_reply(E_POLICY)
end
local priority = optional_priority(5)
if priority == nil then return redis.error_reply(E_PRIORITY) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local waiting, row = KEYS[1], KEYS[2]
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end
new_row(row, ARGV[2], now, priority)
if policy == 'fail' then
  redis.call('HSET', row, 'waits', '1', 'hold', '1')
else
  redis.call('HSET', row, 'waits', '1', 'hold', '1', 'policy', policy)
end
redis.call('ZADD', waiting, dec(now), id)
emit(events_key, 'waiting', id, 0, now, with_priority(priority))
return redis.status_reply('WAITING')
