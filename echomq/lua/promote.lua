--[[
  promote: delayed jobs that are due go back to run.
    KEYS[1] <base>delayed    jobs waiting to run again, score = due time (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    KEYS[5] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most jobs taken
  Derived: <base>job:<id> of each due job, <base>lane:<group> of each lane job and of each group
  reopened, <base>throttled and <base>parked (checked on every call, before anything is written).
  A flat job goes to pending with its due time as score; a lane job to the tail of its lane.
  Ghosts are dropped from delayed. Then groups whose rate window has opened by now (at most limit,
  from <base>throttled) come back to the ring, a wake token each (scripts only: lanes are).
  Replies: :<jobs moved> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "moves"
--- @include "numbers"
--- @include "reopen"
--- @include "wake"
if #KEYS < 4 or #KEYS > 5 or #ARGV ~= 2 then return arity_error('PROMOTE', 4, 2) end
local base = keys_base({ 'delayed', 'pending', 'ring', 'wake' })
local _, events_key = optional_keys(base, 4, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end
local limit = int_arg(ARGV[2], 1)
if limit == nil then return number_error('limit', 1) end
if not types_ok({ 'zset', 'zset', 'list', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

-- The groups to reopen are checked after the jobs' keys and before anything is written.
local due
local moved = move_due(base, now, limit, nil, function()
  local failure = check_reopening(base)
  if failure then return failure end
  local lanes
  lanes, failure = due_lanes(base, now, limit)
  due = lanes
  return failure
end, events_key)
if type(moved) ~= 'number' then return moved end
wake(KEYS[4], reopen_lanes(base, due))
return moved
