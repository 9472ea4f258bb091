-- Queue-wide limits of a flat queue (<base>queueconf): at most `concurrency` leases in active and
-- at most `rate` claims a window of `window_ms`, read by claim and settle's claim part; a lease
-- leaving active while the queue is held at its concurrency limit leaves a wake token.
--- @include "derived"
--- @include "errors"
--- @include "numbers"
--- @include "wake"

-- The queue's window while its rate is reached and jobs wait: a member of <base>throttled that no
-- group can be named (the group grammar has no '*'), so a parked consumer's bound learns when the
-- window opens, as it learns a throttled group's.
local QUEUE_WINDOW = '*'
local QUEUE_WINDOW_MS = 1000

-- <base>queueconf checked as a derived key (may_access, derived_type, the order of check_derived):
-- its type ('none' or 'hash'), or nil and the error reply. Absent, the queue has no limits and is
-- not held: nothing more of it is read.
local function queueconf_type(conf)
  if not may_access(conf) then return nil, redis.error_reply(E_PERM) end
  local t = derived_type(conf)
  if t == nil then return nil, redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'hash' then return nil, redis.error_reply(E_TYPE) end
  return t
end

-- The queue's limits, <base>queueconf checked as a derived key (and <base>throttled when a rate
-- is set): { concurrency, rate, window_ms, start, count } (a field absent or not an integer from
-- 1: no limit; the window as claims see it at now; absent: queueconf is not there, so no limit
-- and nothing held), or nil and the error reply.
local function queue_limits(base, now)
  local conf = base .. 'queueconf'
  local t, failure = queueconf_type(conf)
  if t == nil then return nil, failure end
  if t == 'none' then return { window_ms = QUEUE_WINDOW_MS, start = now, count = 0, absent = true } end
  local f = redis.call('HMGET', conf, 'concurrency', 'rate', 'window_ms', 'window')
  local limits = {
    concurrency = int_arg(f[1] or '', 1),
    rate = int_arg(f[2] or '', 1),
    window_ms = int_arg(f[3] or '', 1) or QUEUE_WINDOW_MS,
    start = now, count = 0,
  }
  if limits.rate then
    failure = check_derived(base .. 'throttled', 'zset')
    if failure then return nil, failure end
    local start, count = string.match(f[4] or '', '^(%d+) (%d+)$')
    if start and #start <= 15 and #count <= 15 and now < tonumber(start) + limits.window_ms then
      limits.start, limits.count = tonumber(start), tonumber(count)
    end
  end
  return limits
end

-- How many of the planned jobs the limits let the claim lease now (active as it stands).
local function limited_take(limits, active, planned)
  local take = planned
  if limits.concurrency then
    take = math.min(take, math.max(0, limits.concurrency - redis.call('ZCARD', active)))
  end
  if limits.rate then take = math.min(take, math.max(0, limits.rate - limits.count)) end
  return take
end

-- After the claim leased `taken` jobs: the window counts them; the queue is held at its
-- concurrency limit (field `held`) while active holds concurrency leases and jobs wait; over its
-- rate, its window's opening waits in throttled. A queue with no limits, not held: nothing.
local function note_queue_limits(base, limits, active, pending, taken)
  if limits.absent then return end
  local conf = base .. 'queueconf'
  local was_held = redis.call('HGET', conf, 'held') ~= false
  if not (limits.concurrency or limits.rate or was_held) then return end
  local waiting = redis.call('ZCARD', pending) > 0
  local held = limits.concurrency ~= nil and waiting
    and redis.call('ZCARD', active) >= limits.concurrency
  if held and not was_held then redis.call('HSET', conf, 'held', '1') end
  if was_held and not held then redis.call('HDEL', conf, 'held') end
  if not limits.rate then return end
  local count = limits.count + taken
  if taken > 0 then redis.call('HSET', conf, 'window', dec(limits.start) .. ' ' .. dec(count)) end
  local throttled = base .. 'throttled'
  local opens = redis.call('ZSCORE', throttled, QUEUE_WINDOW)
  if waiting and count >= limits.rate then
    local at = dec(limits.start + limits.window_ms)
    if opens ~= at then redis.call('ZADD', throttled, at, QUEUE_WINDOW) end
  elseif opens then
    redis.call('ZREM', throttled, QUEUE_WINDOW)
  end
end

-- Whether the queue is held, as the first lease leaving active in this call found it (nil: not
-- checked yet). Only a claim writes `held`, and no call releases a lease after its claim part, so
-- the answer holds for every lease the call releases.
local queue_held = nil

-- The keys a lease leaving active touches for the queue's limits, checked as derived keys before
-- anything is written: <base>queueconf, then <base>wake while the queue is held. Nil, or the
-- error reply. Checked once a call: the same keys, nothing written between the checks.
local function check_queue_slot(base)
  if queue_held ~= nil then return nil end
  local conf = base .. 'queueconf'
  local t, failure = queueconf_type(conf)
  if t == nil then return failure end
  local held = t == 'hash' and redis.call('HGET', conf, 'held') ~= false
  if held then
    failure = check_derived(base .. 'wake', 'list')
    if failure then return failure end
  end
  queue_held = held
  return nil
end

-- A lease leaves active: while the queue is held at its concurrency limit, a wake token.
local function release_queue_slot(base)
  local held = queue_held
  if held == nil then held = redis.call('HGET', base .. 'queueconf', 'held') ~= false end
  if held then wake(base .. 'wake', 1) end
end
