--[[
  extend: push the current lease's deadline to now + lease_ms (a long job's heartbeat).
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>job:<id>   the job row (hash)
    ARGV[1] id               JOB:<rest>
    ARGV[2] fence            integer >= 1, the lease's fence (claim's reply)
    ARGV[3] lease_ms         integer >= 1
    ARGV[4] now              ms, or * for the server clock
  A lease flagged by a cancel is extended too, and answers CANCELLING.
  Replies: +EXTENDED | +CANCELLING | +STALE | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, WRONGTYPE errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "leases"
--- @include "numbers"
if #KEYS ~= 2 or #ARGV ~= 4 then return arity_error('EXTEND', 2, 4) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
if keys_base({ 'active', 'job:' .. id }) == nil then return redis.error_reply(E_KEYS) end
local fence = int_arg(ARGV[2], 1)
if fence == nil then return number_error('fence', 1) end
local lease_ms = int_arg(ARGV[3], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local now = now_arg(ARGV[4])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end

local active, row = KEYS[1], KEYS[2]
if not is_current_lease(active, row, id, fence) then return redis.status_reply('STALE') end
redis.call('ZADD', active, dec(now + lease_ms), id)
return redis.status_reply(extended(row))
