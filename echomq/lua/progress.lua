--[[
  progress: record how far the current lease got, in the row's progress field (the last report
  overwrites the one before; the field stays in the tombstone after an ack).
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>job:<id>   the job row (hash)
    KEYS[3] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] fence            integer >= 1, the lease's fence (claim's reply)
    ARGV[3] progress         any bytes, at most 65536
  Replies: +RECORDED | +STALE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, EMQSIZE, WRONGTYPE errors.
]]
--- @include "args"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "leases"
--- @include "numbers"
local PROGRESS_MAX = 65536
if #KEYS < 2 or #KEYS > 3 or #ARGV ~= 3 then return arity_error('PROGRESS', 2, 3) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local _, events_key = optional_keys(keys_base({ 'active', 'job:' .. id }), 2, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local fence = int_arg(ARGV[2], 1)
if fence == nil then return number_error('fence', 1) end
if #ARGV[3] > PROGRESS_MAX then return redis.error_reply(E_PROGRESS) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local active, row = KEYS[1], KEYS[2]
if not is_current_lease(active, row, id, fence) then return redis.status_reply('STALE') end
redis.call('HSET', row, 'progress', ARGV[3])
emit(events_key, 'progress', id, attempts_of(events_key, row), nil, 'fence', dec(fence))
return redis.status_reply('RECORDED')
