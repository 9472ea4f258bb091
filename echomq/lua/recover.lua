--[[
  recover: expired leases go back where they came from.
    KEYS[1] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most leases taken
  Derived: <base>job:<id> of each expired lease, <base>lane:<group> of each lane job.
  A flat job returns to pending at its enqueued_at; a lane job to the head of its lane (latest
  deadline pushed first, so the lane keeps their order). Ghosts are dropped from active.
  Replies: :<jobs moved> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM errors.
]]
if #KEYS ~= 4 or #ARGV ~= 2 then return arity_error('RECOVER', 4, 2) end
local base = keys_base({ 'active', 'pending', 'ring', 'wake' })
if base == nil then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end
local limit = int_arg(ARGV[2], 1)
if limit == nil then return number_error('limit', 1) end
if not types_ok({ 'zset', 'zset', 'list', 'list' }) then return redis.error_reply(E_TYPE) end

local active, pending, ring, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local due = redis.call('ZRANGEBYSCORE', active, '-inf', dec(now), 'WITHSCORES', 'LIMIT', '0', dec(limit))
local moves, ghosts = plan_moves(base, due, now)
if moves == nil then return ghosts end
for i = 1, #ghosts do redis.call('ZREM', active, ghosts[i]) end
for i = #moves, 1, -1 do
  local move = moves[i]
  redis.call('ZREM', active, move.id)
  if move.lane then
    push_lane(ring, move, 'LPUSH')
  else
    redis.call('ZADD', pending, move.score, move.id)
  end
end
wake(wake_key, #moves)
return #moves
