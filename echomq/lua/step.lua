--[[
  step: record a durable step's output in the job's row under the current lease, once: the row's
  step:<step> field takes the output and its steps field the bytes of every step recorded (one
  HSET); a name recorded already keeps its output and the call changes nothing (+KEPT). The
  fields go with the row: a tombstone keeps them until it expires, a dead job until it is
  forgotten.
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>job:<id>   the job row (hash)
    ARGV[1] id               JOB:<rest>
    ARGV[2] fence            integer >= 1, the lease's fence (claim's reply)
    ARGV[3] step             the step's name: 1 to 200 bytes of A-Z a-z 0-9 . _ : -
    ARGV[4] output           any bytes, at most 262144; a job's steps at most 1048576 in all
  Replies: +RECORDED | +KEPT | +STALE | EMQARITY, EMQKIND, EMQLANE, EMQKEYS, EMQNUM, EMQSIZE,
  WRONGTYPE errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "leases"
--- @include "numbers"
local E_STEP_NAME = 'EMQLANE step must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -'
local E_STEP_OUTPUT = 'EMQSIZE output must be at most 262144 bytes'
local E_STEPS_TOTAL = "EMQSIZE a job's steps must be at most 1048576 bytes in all"
local STEP_MAX, STEPS_MAX = 262144, 1048576
if #KEYS ~= 2 or #ARGV ~= 4 then return arity_error('STEP', 2, 4) end
local id, name, output = ARGV[1], ARGV[3], ARGV[4]
if not id_ok(id) then return redis.error_reply(E_KIND) end
if not lane_ok(name) then return redis.error_reply(E_STEP_NAME) end
if keys_base({ 'active', 'job:' .. id }) == nil then return redis.error_reply(E_KEYS) end
local fence = int_arg(ARGV[2], 1)
if fence == nil then return number_error('fence', 1) end
if #output > STEP_MAX then return redis.error_reply(E_STEP_OUTPUT) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end

local active, row = KEYS[1], KEYS[2]
if not is_current_lease(active, row, id, fence) then return redis.status_reply('STALE') end
local field = 'step:' .. name
if redis.call('HEXISTS', row, field) == 1 then return redis.status_reply('KEPT') end
local total = int_field(redis.call('HGET', row, 'steps'), 0) + #output
if total > STEPS_MAX then return redis.error_reply(E_STEPS_TOTAL) end
redis.call('HSET', row, field, output, 'steps', dec(total))
return redis.status_reply('RECORDED')
