-- The events stream: one XADD per change a call makes, after the change, when the call declared
-- <base>events (its last key). Fields: kind, job, attempt, at (when the call takes now), then the
-- extra field/value pairs given, in order (fence, lane, due, priority). The id is the server's
-- and the trim approximate; the server propagates both as it applied them (an explicit id and
-- MAXLEN =), so a replica or an AOF replays the same entries.
--- @include "numbers"
--- @include "rows"
local EVENTS_MAXLEN = '10000'

-- The attempts a job's row counts (no row, absent or not a count: 0), read only when events are
-- on, under either layout's name (row_field). The row is absent or a hash (the caller checked its
-- type or found its lease): one HMGET.
local function attempts_of(key, row)
  if not key then return 0 end
  return int_field(row_field(row, 'a'), 0)
end

-- attempts_of of a row that may be of any type (a dead id's, not checked): 0 unless a hash.
local function attempts_of_any(key, row)
  if not key or redis.call('TYPE', row)['ok'] ~= 'hash' then return 0 end
  return attempts_of(key, row)
end

-- The lane field of an entry whose last field it is: nothing for a flat job.
local function with_lane(lane)
  if lane then return 'lane', lane end
end

-- The priority field of an entry, last of its fields: nothing at priority 0.
local function with_priority(p)
  if p ~= 0 then return 'priority', dec(p) end
end

local function emit(key, kind, id, attempt, at, ...)
  if not key then return end
  if at then
    redis.call('XADD', key, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'kind', kind, 'job', id,
      'attempt', dec(attempt), 'at', dec(at), ...)
  else
    redis.call('XADD', key, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'kind', kind, 'job', id,
      'attempt', dec(attempt), ...)
  end
end
