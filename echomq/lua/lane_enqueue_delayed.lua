--[[
  lane_enqueue_delayed: admit a job once into delayed, as enqueue_delayed, marked with its group:
  promote moves it to the tail of its group's lane when due. Scripts only: no native twin.
    KEYS[1] <base>job:<id>   the job row (hash)
    KEYS[2] <base>delayed    jobs waiting to run, score = due time (zset)
    KEYS[3] <base>wake       wake tokens (list)
    KEYS[4] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] payload          any bytes
    ARGV[3] group            1..200 bytes of [A-Za-z0-9._:-]
    ARGV[4] now              ms, or * for the server clock
    ARGV[5] delay_ms         integer >= 0
    ARGV[6] at_ms            integer >= 0, an absolute due time (0: none)
    ARGV[7] priority         optional: -100 to 100, higher claimed first (0 when left off)
  Replies: +ENQUEUED | +DUPLICATE | EMQARITY, EMQKIND, EMQLANE, EMQKEYS, EMQNUM, WRONGTYPE errors.
]]
--- @include "admit"
--- @include "args"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "numbers"
--- @include "priority"
--- @include "wake"
if #KEYS < 3 or #KEYS > 4 or #ARGV < 6 or #ARGV > 7 then
  return optional_arity_error('LANE_ENQUEUE_DELAYED', 3, 6, 7)
end
local id, group = ARGV[1], ARGV[3]
if not id_ok(id) then return redis.error_reply(E_KIND) end
if not lane_ok(group) then return redis.error_reply(E_LANE) end
local _, events_key = optional_keys(keys_base({ 'job:' .. id, 'delayed', 'wake' }), 3, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[4])
if now == nil then return redis.error_reply(E_NOW) end
local delay_ms = int_arg(ARGV[5], 0)
if delay_ms == nil then return number_error('delay_ms', 0) end
local at_ms = int_arg(ARGV[6], 0)
if at_ms == nil then return number_error('at_ms', 0) end
local priority = optional_priority(7)
if priority == nil then return redis.error_reply(E_PRIORITY) end
if not types_ok({ 'hash', 'zset', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local row, delayed, wake_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end
new_row(row, ARGV[2], now, priority, group)
redis.call('ZADD', delayed, dec(math.max(now + delay_ms, at_ms)), id)
wake(wake_key, 1)
emit(events_key, 'enqueued', id, 0, now, 'lane', group, 'due',
  dec(math.max(now + delay_ms, at_ms)), with_priority(priority))
return redis.status_reply('ENQUEUED')
