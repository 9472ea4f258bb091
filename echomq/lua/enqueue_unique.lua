--[[
  enqueue_unique: admit a job once per dedupe key, in one of three modes.
    KEYS[1] <base>pending        flat jobs ready to run (zset)
    KEYS[2] <base>delayed        jobs waiting to run, score = due time (zset)
    KEYS[3] <base>job:<id>       the job row (hash)
    KEYS[4] <base>wake           wake tokens (list)
    KEYS[5] <base>dedupe:<key>   the dedupe key: the id of the job holding it (string)
    KEYS[6] <base>events         optional: the queue's events (stream), the last key
    ARGV[1] id                   JOB:<rest>
    ARGV[2] payload              any bytes
    ARGV[3] now                  ms, or * for the server clock
    ARGV[4] mode                 dedupe | debounce | throttle
    ARGV[5] period_ms            integer >= 0: the mode's window
    ARGV[6] delay_ms             integer >= 0: a job admitted runs no earlier than now + delay_ms
    ARGV[7] priority             optional: -100 to 100, higher claimed first (0 when left off)
  dedupe: while the key names a job whose row exists, or has a TTL (the window after that job
  ended), +DUPLICATE; else the job is admitted holding the key (row fields dedupe, dedupe_ms).
  debounce: the key names a job still in delayed: its payload is replaced and its due time set to
  now + period_ms + delay_ms, +DEBOUNCED; else the job is admitted into delayed at that time,
  holding the key (row field dedupe). throttle: the key exists, +THROTTLED; else the job is
  admitted and the key set for period_ms.
  Replies: +ENQUEUED | +DUPLICATE | +DEBOUNCED | +THROTTLED | EMQARITY, EMQKIND, EMQKEYS, EMQNUM,
  EMQMODE, WRONGTYPE, NOPERM, TRYAGAIN errors.
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
if #KEYS < 5 or #KEYS > 6 or #ARGV < 6 or #ARGV > 7 then
  return optional_arity_error('ENQUEUE_UNIQUE', 5, 6, 7)
end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'pending', 'delayed', 'job:' .. id, 'wake' })
if not named_key_ok(base, KEYS[5], 'dedupe:') then return redis.error_reply(E_KEYS) end
local _, events_key = optional_keys(base, 5, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[3])
if now == nil then return redis.error_reply(E_NOW) end
local mode = ARGV[4]
if mode ~= 'dedupe' and mode ~= 'debounce' and mode ~= 'throttle' then
  return redis.error_reply(E_MODE)
end
local period_ms = int_arg(ARGV[5], 0)
if period_ms == nil then return number_error('period_ms', 0) end
local delay_ms = int_arg(ARGV[6], 0)
if delay_ms == nil then return number_error('delay_ms', 0) end
local priority = optional_priority(7)
if priority == nil then return redis.error_reply(E_PRIORITY) end
if not types_ok({ 'zset', 'zset', 'hash', 'list', 'string' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local pending, delayed, row, wake_key, dedupe_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Step 6 (dedupe, debounce): the row of the job the key names, when it names an id.
local holder_id, holder = nil, nil
if mode ~= 'throttle' then
  local held = redis.call('GET', dedupe_key)
  if held and id_ok(held) then
    holder_id, holder = held, base .. 'job:' .. held
    local failure = check_row(holder)
    if failure then return failure end
  end
end
if redis.call('EXISTS', row) == 1 then return redis.status_reply('DUPLICATE') end

-- The job admitted: its row (with extra fields), into delayed at due, or pending when due is nil.
local function admit(due, extra)
  new_row(row, ARGV[2], now, priority, nil, extra)
  if due then
    redis.call('ZADD', delayed, dec(due), id)
  else
    redis.call('ZADD', pending, dec(pending_score(priority, now)), id)
  end
end

-- The entry and the reply of an admission: one wake token, then the enqueued entry.
local function admitted(due)
  wake(wake_key, 1)
  if due then
    emit(events_key, 'enqueued', id, 0, now, 'due', dec(due), with_priority(priority))
  else
    emit(events_key, 'enqueued', id, 0, now, with_priority(priority))
  end
  return redis.status_reply('ENQUEUED')
end

local held_by = string.sub(dedupe_key, #base + 1)
local later = nil
if delay_ms > 0 then later = now + delay_ms end
if mode == 'dedupe' then
  if redis.call('EXISTS', dedupe_key) == 1
      and ((holder and redis.call('EXISTS', holder) == 1) or redis.call('PTTL', dedupe_key) >= 0) then
    return redis.status_reply('DUPLICATE')
  end
  local extra = { 'dedupe', held_by }
  if period_ms > 0 then extra[3], extra[4] = 'dedupe_ms', dec(period_ms) end
  admit(later, extra)
  redis.call('SET', dedupe_key, id)
  return admitted(later)
elseif mode == 'debounce' then
  local due = now + period_ms + delay_ms
  if holder and redis.call('ZSCORE', delayed, holder_id) and redis.call('EXISTS', holder) == 1 then
    redis.call('HSET', holder, 'p', ARGV[2])
    redis.call('ZADD', delayed, dec(due), holder_id)
    emit(events_key, 'debounced', holder_id, attempts_of(events_key, holder), now, 'due', dec(due))
    return redis.status_reply('DEBOUNCED')
  end
  admit(due, { 'dedupe', held_by })
  redis.call('SET', dedupe_key, id)
  return admitted(due)
end
if redis.call('EXISTS', dedupe_key) == 1 then return redis.status_reply('THROTTLED') end
admit(later)
if period_ms > 0 then redis.call('SET', dedupe_key, id, 'PX', dec(period_ms)) end
return admitted(later)
