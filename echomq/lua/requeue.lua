--[[
  requeue: a dead job runs again — back to pending (now) or the tail of its lane, with a fresh
  count of attempts and no deadline (an expired job runs: its expires_at goes); its last error
  stays on the row. The queue's fence counter is not reset, so
  a lease of the job's earlier life stays stale. Scripts only: an operator's tool.
    KEYS[1] <base>dead       jobs that used up their attempts (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    KEYS[5] <base>job:<id>   the job row (hash)
    KEYS[6] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>
    ARGV[2] now              ms, or * for the server clock
  Derived: <base>lane:<group> and <base>parked of a lane job; <base>ended:<id>, deleted (the job
  runs again).
  Replies: +REQUEUED | +NOT_DEAD | EMQARITY, EMQKIND, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "lanes"
--- @include "moves"
--- @include "numbers"
--- @include "wake"
if #KEYS < 5 or #KEYS > 6 or #ARGV ~= 2 then return arity_error('REQUEUE', 5, 2) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'dead', 'pending', 'ring', 'wake', 'job:' .. id })
local _, events_key = optional_keys(base, 5, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'zset', 'zset', 'list', 'list', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local dead, pending, ring, wake_key, row = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('ZSCORE', dead, id) == false or redis.call('EXISTS', row) == 0 then
  return redis.status_reply('NOT_DEAD')
end
local moves, failure = plan_moves(base, { id, dec(now) }, nil)
if moves == nil then return failure end
local ended = base .. 'ended:' .. id
failure = check_ended(ended)
if failure then return failure end
local move = moves[1]
if move.lane then -- its group may be parked: read before the lane's job joins the ring
  failure = check_derived(base .. 'parked', 'hash')
  if failure then return failure end
end
redis.call('ZREM', dead, id)
redis.call('HSET', row, 'a', '0')
redis.call('HDEL', row, 'expires_at')
redis.call('DEL', ended)
if move.lane then
  push_lane(ring, move, 'RPUSH')
else
  redis.call('ZADD', pending, move.score, id)
end
wake(wake_key, 1)
emit(events_key, 'requeued', id, 0, now, with_lane(move.lane))
return redis.status_reply('REQUEUED')
