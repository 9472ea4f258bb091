--[[
  enqueue_many: admit many flat jobs in one call, each once, a verdict per job in list order.
  A job of delay_ms 0 is admitted as enqueue admits it (pending, in its priority's band at now),
  one of delay_ms above 0 as enqueue_delayed (delayed, due at now + delay_ms); then one wake
  token per job admitted, bounded as enqueue's, after every job's writes.
    KEYS[1] <base>pending    flat jobs ready to run (zset)
    KEYS[2] <base>delayed    jobs waiting to run, score = due time (zset)
    KEYS[3] <base>wake       wake tokens (list)
    KEYS[4] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] now              ms, or * for the server clock
    ARGV[2..] jobs           `<id> <payload> <delay_ms> <priority>` each, at most 10000 of them
  Derived: <base>job:<id> of every job, checked in list order before anything is written.
  Replies: [+ENQUEUED | +DUPLICATE per job] | EMQARITY, EMQKEYS, EMQNUM, EMQITEM, EMQKIND,
  WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "admit"
--- @include "args"
--- @include "derived"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "numbers"
--- @include "priority"
--- @include "wake"
local MAX_JOBS, WIDTH = 10000, 4
if #KEYS < 3 or #KEYS > 4 or #ARGV < 1 then return variadic_arity_error('ENQUEUE_MANY', 3, 1) end
if #ARGV - 1 > MAX_JOBS * WIDTH then return many_error('ENQUEUE_MANY', MAX_JOBS) end
local base = keys_base({ 'pending', 'delayed', 'wake' })
local _, events_key = optional_keys(base, 3, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end

local delays, priorities, n = {}, {}, 0
for i = 2, #ARGV, WIDTH do
  n = n + 1
  if i + WIDTH - 1 > #ARGV then
    return item_error(n, '<id> <payload> <delay_ms> <priority>')
  end
  if not id_ok(ARGV[i]) then return redis.error_reply(E_KIND) end
  local delay_ms = int_arg(ARGV[i + 2], 0)
  if delay_ms == nil then return number_error('delay_ms', 0) end
  local priority = priority_arg(ARGV[i + 3])
  if priority == nil then return redis.error_reply(E_PRIORITY) end
  delays[n], priorities[n] = delay_ms, priority
end
if not types_ok({ 'zset', 'zset', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

-- Every row, in list order: the caller's ACL, a slot moving away, a hash or absent. Its type
-- then tells whether the id is taken; an id met earlier in the call is taken by then.
local rows, taken = {}, {}
for j = 1, n do
  local row = base .. 'job:' .. ARGV[2 + (j - 1) * WIDTH]
  if not may_access(row) then return redis.error_reply(E_PERM) end
  local t = derived_type(row)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'hash' then return redis.error_reply(E_TYPE) end
  rows[j] = row
  if t ~= 'none' then taken[row] = true end
end

local pending, delayed, wake_key = KEYS[1], KEYS[2], KEYS[3]
local verdicts, admitted = {}, 0
for j = 1, n do
  local row, at = rows[j], 2 + (j - 1) * WIDTH
  if taken[row] then
    verdicts[j] = redis.status_reply('DUPLICATE')
  else
    local id, priority, delay_ms = ARGV[at], priorities[j], delays[j]
    taken[row] = true
    new_row(row, ARGV[at + 1], now, priority)
    if delay_ms == 0 then
      redis.call('ZADD', pending, dec(pending_score(priority, now)), id)
      emit(events_key, 'enqueued', id, 0, now, with_priority(priority))
    else
      redis.call('ZADD', delayed, dec(now + delay_ms), id)
      emit(events_key, 'enqueued', id, 0, now, 'due', dec(now + delay_ms), with_priority(priority))
    end
    admitted = admitted + 1
    verdicts[j] = redis.status_reply('ENQUEUED')
  end
end
wake(wake_key, admitted)
return verdicts
