--[[
  trim_dead: forget the oldest dead jobs beyond the queue's bounds — more of them than max_count,
  or dead since max_age_ms or longer — at most limit, deleting their rows and ended keys as purge
  does. Housekeeping runs it in steps; an operator sets the bounds.
    KEYS[1] <base>dead       jobs that used up their attempts, score = time of death (zset)
    KEYS[2] <base>deadconf   the bounds: max_count, max_age_ms (hash; a field absent: its
    KEYS[3] <base>events     optional: the queue's events (stream), the last key
                             default, 10000 jobs and 15552000000 ms; 0: no bound of that kind)
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most jobs trimmed
  Derived: <base>job:<id> and <base>ended:<id> of each trimmed job.
  Replies: :<jobs trimmed> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "forget"
--- @include "errors"
--- @include "keys"
--- @include "numbers"
if #KEYS < 2 or #KEYS > 3 or #ARGV ~= 2 then return arity_error('TRIM_DEAD', 2, 2) end
local base = keys_base({ 'dead', 'deadconf' })
local _, events_key = optional_keys(base, 2, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end
local limit = int_arg(ARGV[2], 1)
if limit == nil then return number_error('limit', 1) end
if not types_ok({ 'zset', 'hash' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

-- The bounds, each absent field its default; a field that is not an integer refuses the call.
local fields = { 'max_count', 'max_age_ms' }
local defaults = { 10000, 15552000000 }
local bounds = redis.call('HMGET', KEYS[2], fields[1], fields[2])
for i = 1, 2 do
  if bounds[i] == false then
    bounds[i] = defaults[i]
  else
    bounds[i] = int_arg(bounds[i], 0)
    if bounds[i] == nil then return number_error('deadconf ' .. fields[i], 0) end
  end
end
local max_count, max_age_ms = bounds[1], bounds[2]

-- The oldest first, while dead holds more than max_count or the job died max_age_ms ago or more.
local dead = KEYS[1]
local over = 0
if max_count > 0 then over = redis.call('ZCARD', dead) - max_count end
local entries = redis.call('ZRANGE', dead, '0', dec(limit - 1), 'WITHSCORES')
local ids = {}
for i = 1, #entries, 2 do
  local n = (i + 1) / 2
  local aged = max_age_ms > 0 and tonumber(entries[i + 1]) <= now - max_age_ms
  if n > over and not aged then break end
  ids[n] = entries[i]
end
local err = check_forgettable(base, ids)
if err then return err end
forget_dead(base, dead, ids, events_key, now)
return #ids
