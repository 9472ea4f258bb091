--[[
  purge: forget dead jobs — the oldest first, at most limit — deleting their rows, so their ids
  may be admitted again. Scripts only: an operator's tool.
    KEYS[1] <base>dead       jobs that used up their attempts (zset)
    KEYS[2] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] limit            integer >= 1
  Derived: <base>job:<id> and <base>ended:<id> of each purged job.
  Replies: :<jobs purged> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "forget"
--- @include "errors"
--- @include "keys"
--- @include "numbers"
if #KEYS < 1 or #KEYS > 2 or #ARGV ~= 1 then return arity_error('PURGE', 1, 1) end
local base = keys_base({ 'dead' })
local _, events_key = optional_keys(base, 1, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local limit = int_arg(ARGV[1], 1)
if limit == nil then return number_error('limit', 1) end
if not types_ok({ 'zset' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local dead = KEYS[1]
local ids = redis.call('ZRANGE', dead, '0', dec(limit - 1))
local err = check_forgettable(base, ids)
if err then return err end
forget_dead(base, dead, ids, events_key)
return #ids
