-- The join: what a job ending (done, dead or cancelled) does to the jobs waiting on it (its
-- row's `next`) and to its dedupe key (`dedupe`, `dedupe_ms`); and the moves of a waiting job
-- (released, fails, cancelled), shared by after.lua and the end hook of every transition that
-- ends a job. Plan, then apply: a join plan (new_join) walks the dependents reading only, on an
-- overlay of what it already planned, checking each derived key it meets once (ACL, moving
-- slot, type; the order of PROTOCOL.md "The end hook"); the caller applies the planned steps
-- after every check passed (apply_steps), in the order they were planned.
--- @include "cancelled"
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"
--- @include "numbers"
--- @include "priority"
--- @include "rows"
--- @include "wake"

-- A join plan on the queue at base: now (nil for a call that takes none, ack and ack with a
-- result: a job released then goes to pending at its enqueued_at), events_key (nil: none).
local function new_join(base, now, events_key)
  return { base = base, now = now, events_key = events_key, checked = {}, state = {},
           next_add = {}, steps = {}, failure = nil }
end

-- The refusal of a call that would count on a waiting job's `waits` that is not a count
-- (count_field): its own in after, a dependent's in an end hook.
local function waits_error()
  return number_error('waits', 0)
end

-- Check a derived key once per call; a failure is kept (the first one decides the reply).
local function join_check(j, key, expected)
  if j.failure or j.checked[key] then return end
  j.checked[key] = true
  j.failure = check_derived(key, expected)
end

-- A job's `next` as a list of ids, the ids this call appends after them.
local function next_of(j, id, field)
  local ids = {}
  if field then
    for d in string.gmatch(field, '[^ ]+') do ids[#ids + 1] = d end
  end
  local added = j.next_add[id]
  if added then
    for n = 1, #added do ids[#ids + 1] = added[n] end
  end
  return ids
end

-- The planned state of a job that may be waiting: its row checked first (a hash or absent); it
-- waits while in <base>waiting with its row present. Read once, then kept on the overlay.
local function waiter(j, d)
  local s = j.state[d]
  if s then return s end
  local row = j.base .. 'job:' .. d
  join_check(j, row, 'hash')
  s = { row = row, waiting = false }
  j.state[d] = s
  if j.failure then return s end
  if redis.call('ZSCORE', j.base .. 'waiting', d) ~= false and redis.call('EXISTS', row) == 1 then
    local f = redis.call('HMGET', row, 'waits', 'hold', 'policy')
    s.waiting, s.waits, s.hold = true, count_field(f[1]), f[2] ~= false
    s.policy = f[3] or 'fail'
  end
  return s
end

-- The keys each move derives, in this order.
local function plan_release(j, d, s)
  join_check(j, j.base .. 'pending', 'zset')
  join_check(j, j.base .. 'wake', 'list')
  s.waiting = false
  j.steps[#j.steps + 1] = { op = 'release', id = d, row = s.row }
end

local function plan_fail(j, d, s, text)
  join_check(j, j.base .. 'dead', 'zset')
  join_check(j, j.base .. 'ended:' .. d, 'list')
  s.waiting = false
  j.steps[#j.steps + 1] = { op = 'fail', id = d, row = s.row, error = text }
end

local function plan_cancel(j, d, s, mark)
  join_check(j, j.base .. 'ended:' .. d, 'list')
  s.waiting = false
  j.steps[#j.steps + 1] = { op = 'cancel', id = d, row = s.row, mark = mark }
end

-- One dependent d of a job that ended so (err: the dead job's error; mark: the cancel mark).
local function plan_dependent(j, d, outcome, parent, err, mark, work)
  local s = waiter(j, d)
  if j.failure or not s.waiting then return end
  if outcome == 'dead' and s.policy == 'continue' then
    plan_release(j, d, s)
  elseif outcome == 'dead' and s.policy ~= 'ignore' then
    local text = 'parent ' .. parent .. ' died: ' .. err
    plan_fail(j, d, s, text)
    work[#work + 1] = { id = d, row = s.row, outcome = 'dead', detail = text }
  elseif outcome == 'cancelled' then
    plan_cancel(j, d, s, mark)
    work[#work + 1] = { id = d, row = s.row, outcome = 'cancelled', detail = mark }
  else -- done, or dead under ignore
    if s.waits == nil then -- not a count: refused before anything is written
      j.failure = waits_error()
      return
    end
    s.waits = s.waits - 1
    if s.waits <= 0 and not s.hold then
      plan_release(j, d, s)
    else
      j.steps[#j.steps + 1] = { op = 'decr', id = d, row = s.row }
    end
  end
end

-- A planned job's end, and the ends it causes, as a worklist (breadth first, in `next` order):
-- outcome 'done', 'dead' (detail: the error its dependents' own error quotes) or 'cancelled'
-- (detail: { retention, at }, the cancel mark they inherit). The job's row is read before the
-- call writes it (one HMGET of next, dedupe, dedupe_ms; for the job the call ends, read (a
-- settlement's read_lease) when given, that read's). Returns the failure of a check, or nil.
local function plan_end(j, id, row, outcome, detail, read)
  local work = { { id = id, row = row, outcome = outcome, detail = detail } }
  local k = 1
  while k <= #work and not j.failure do
    local w = work[k]
    k = k + 1
    local f
    if k == 2 and read then
      f = { read.next, read.dedupe, read.dedupe_ms }
    else
      f = redis.call('HMGET', w.row, 'next', 'dedupe', 'dedupe_ms')
    end
    if f[2] then
      local key = j.base .. f[2]
      join_check(j, key, 'string')
      j.steps[#j.steps + 1] = { op = 'dedupe', id = w.id, key = key, ms = int_field(f[3], 0) }
    end
    local ids = next_of(j, w.id, f[1])
    if #ids > 0 then join_check(j, j.base .. 'waiting', 'zset') end
    for n = 1, #ids do
      if j.failure then break end
      plan_dependent(j, ids[n], w.outcome, w.id, w.detail, w.detail, work)
    end
  end
  return j.failure
end

-- A pending job whose deadline a claim met (include/claims.lua plan_claims): it leaves pending
-- for dead with the error 'expired' (dead, its ended key and counts checked, in that order), then
-- its end hook as any dead job's. Returns the failure of a check, or nil.
local function plan_expire(j, id, row)
  join_check(j, j.base .. 'dead', 'zset')
  join_check(j, j.base .. 'ended:' .. id, 'list')
  join_check(j, j.base .. 'counts', 'hash')
  if j.failure then return j.failure end
  j.steps[#j.steps + 1] = { op = 'expire', id = id, row = row }
  return plan_end(j, id, row, 'dead', 'expired')
end

-- The cancel mark a cancelled job's dependents inherit: its row's (retention, time).
local function mark_of(row)
  local f = redis.call('HMGET', row, 'cancel', 'cancelled')
  return { int_field(f[1], 0), int_field(f[2], 0) }
end

local function leave_waiting(j, step)
  redis.call('ZREM', j.base .. 'waiting', step.id)
  redis.call('HDEL', step.row, 'waits', 'hold')
end

local APPLY = {
  dedupe = function(j, step)
    if redis.call('GET', step.key) ~= step.id then return end
    if step.ms > 0 then
      redis.call('PEXPIRE', step.key, dec(step.ms))
    else
      redis.call('DEL', step.key)
    end
  end,
  decr = function(_, step)
    redis.call('HINCRBY', step.row, 'waits', '-1')
  end,
  incr = function(_, step)
    redis.call('HINCRBY', step.row, 'waits', '1')
  end,
  link = function(_, step)
    local cur = redis.call('HGET', step.row, 'next')
    redis.call('HSET', step.row, 'next', cur and (cur .. ' ' .. step.child) or step.child)
  end,
  seal = function(_, step)
    redis.call('HDEL', step.row, 'hold')
    redis.call('HINCRBY', step.row, 'waits', '-1')
  end,
  release = function(j, step)
    local attempt = attempts_of(j.events_key, step.row)
    local at = j.now or int_field(row_field(step.row, 't'), 0)
    leave_waiting(j, step)
    local p = row_priority(step.row)
    redis.call('ZADD', j.base .. 'pending', dec(pending_score(p, at)), step.id)
    wake(j.base .. 'wake', 1)
    local ev = j.events_key
    emit(ev, 'ready', step.id, attempt, j.now, with_priority(p))
  end,
  fail = function(j, step)
    local attempt = attempts_of(j.events_key, step.row)
    leave_waiting(j, step)
    redis.call('HSET', step.row, 'error', step.error)
    redis.call('ZADD', j.base .. 'dead', dec(j.now), step.id)
    mark_ended(j.base .. 'ended:' .. step.id, nil)
    local ev = j.events_key
    emit(ev, 'dead', step.id, attempt, j.now)
  end,
  expire = function(j, step)
    local attempt = attempts_of(j.events_key, step.row)
    redis.call('ZREM', j.base .. 'pending', step.id)
    redis.call('HSET', step.row, 'error', 'expired')
    redis.call('ZADD', j.base .. 'dead', dec(j.now), step.id)
    local counts = j.base .. 'counts'
    redis.call('HSET', counts, 'expired', dec(int_field(redis.call('HGET', counts, 'expired'), 0) + 1))
    mark_ended(j.base .. 'ended:' .. step.id, nil)
    emit(j.events_key, 'dead', step.id, attempt, j.now)
  end,
  cancel = function(j, step)
    local attempt = attempts_of(j.events_key, step.row)
    leave_waiting(j, step)
    local retention = step.mark[1]
    if retention > 0 then mark_cancel(step.row, retention, step.mark[2]) end
    bury_cancelled(step.row, j.base .. 'ended:' .. step.id, retention)
    local ev = j.events_key
    emit(ev, 'cancelled', step.id, attempt, j.now)
  end,
}

-- Apply the steps planned from index `from` to `to` (default: all), in order.
local function apply_steps(j, from, to)
  for n = from or 1, to or #j.steps do
    local step = j.steps[n]
    APPLY[step.op](j, step)
  end
end

-- The end hook of a job the call ends: plans it (see plan_end) and returns the range of its
-- steps, to apply after the job's own writes, or nil, nil, the failure of a check. read: the
-- call's read_lease of the row, when it made one.
local function plan_hook(j, id, row, outcome, detail, read)
  local from = #j.steps + 1
  local failure = plan_end(j, id, row, outcome, detail, read)
  if failure then return nil, nil, failure end
  return from, #j.steps
end
