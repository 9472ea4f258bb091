-- Leasing jobs: the fence counter, the walk of pending, a paused queue.
--- @include "derived"
--- @include "errors"
--- @include "numbers"

local FENCE_MAX = 999999999999998

-- The value of the queue's fence counter (absent: 0), or nil when it holds anything else than
-- an integer the next claim can still count up from.
local function fence_counter(key)
  local value = redis.call('GET', key)
  if value == false then return 0 end
  local n = int_arg(value, 0)
  if n == nil or n > FENCE_MAX then return nil end
  return n
end

-- A row still holding the earlier layout's names (a `payload`: an earlier release wrote it),
-- rewritten to this one's before its lease, as echomq migrate would: `p` and `t` get `payload`
-- and `enqueued_at` unless already set (one HSET, when either is to be set), then the four old
-- names go (one HDEL). Returns the payload and the attempts (`a`, else `attempts`) to lease with.
local function upgrade_row(row, a, p, payload)
  local old = redis.call('HMGET', row, 'attempts', 'enqueued_at', 't')
  local sets = {}
  if not p then sets[#sets + 1] = 'p'; sets[#sets + 1] = payload end
  if old[2] and not old[3] then sets[#sets + 1] = 't'; sets[#sets + 1] = old[2] end
  if #sets > 0 then redis.call('HSET', row, unpack(sets)) end
  redis.call('HDEL', row, 'payload', 'attempts', 'enqueued_at', 'fence')
  return p or payload, a or old[1]
end

-- Lease a job: count the attempt, take the next fence (SET, so a replica copies the value the
-- lease was given), put the id in active until now + lease_ms. Returns attempt, fence and the
-- row's payload ('' when it has none), read with its attempts before the lease writes; a row of
-- the earlier layout is upgraded first (upgrade_row).
local function lease(row, id, active, fence_key, last_fence, deadline)
  local f = redis.call('HMGET', row, 'a', 'p', 'payload')
  if f[3] then f[2], f[1] = upgrade_row(row, f[1], f[2], f[3]) end
  local attempt = int_field(f[1], 0) + 1
  local fence = last_fence + 1
  redis.call('SET', fence_key, dec(fence))
  redis.call('HSET', row, 'a', dec(attempt), 'f', dec(fence))
  redis.call('ZADD', active, dec(deadline), id)
  return attempt, fence, f[2] or ''
end

-- The most expired jobs one walk ends (echomq/engine/transitions.py EXPIRED_MAX): a queue full
-- of jobs past their deadline is cleared a bounded piece a call.
local EXPIRED_MAX = 100

-- Whether the row's deadline (expires_at, from an enqueue given one) is met by now: an integer
-- from 1 at most now. Absent, 0 or not an integer: no deadline.
local function expired_by(row, now)
  local at = int_field(redis.call('HGET', row, 'expires_at'), 0)
  return at > 0 and at <= now
end

-- The walk of claim, for up to count jobs: from pending's lowest entry, live rows to lease,
-- ghosts (no row, or a row of another type) to drop and rows whose deadline now meets to end
-- (at most EXPIRED_MAX: the walk stops at the bound), every row checked before anything is
-- written. Returns claims, ghosts and expired ({id, row} each but ghosts), or nil, nil, nil, the
-- error reply.
local function plan_claims(base, pending, count, now)
  local claims, ghosts, expired = {}, {}, {}
  local rank = 0
  while #claims < count and #expired < EXPIRED_MAX do
    local head = redis.call('ZRANGE', pending, rank, rank)
    if #head == 0 then break end
    local row = base .. 'job:' .. head[1]
    if not may_access(row) then return nil, nil, nil, redis.error_reply(E_PERM) end
    local row_type = derived_type(row)
    if row_type == nil then return nil, nil, nil, redis.error_reply(E_MOVING) end
    if row_type ~= 'hash' then
      ghosts[#ghosts + 1] = head[1]
    elseif expired_by(row, now) then
      expired[#expired + 1] = { id = head[1], row = row }
    else
      claims[#claims + 1] = { id = head[1], row = row }
    end
    rank = rank + 1
  end
  return claims, ghosts, expired
end

-- Whether the whole queue is paused (<base>paused exists), the flag checked as a derived key (the
-- caller's ACL, a slot that moves): true or false, or nil and the error reply.
local function queue_paused(base)
  local key = base .. 'paused'
  if not may_access(key) then return nil, redis.error_reply(E_PERM) end
  local t = derived_type(key)
  if t == nil then return nil, redis.error_reply(E_MOVING) end
  return t ~= 'none'
end
