--[[
  recover: expired leases go back where they came from, or to dead when their attempts are used up.
    KEYS[1] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    KEYS[5] <base>dead       jobs that used up their attempts, score = time of death (zset)
    KEYS[6] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most leases taken
    ARGV[3] max_attempts     integer >= 1
  Derived: <base>job:<id> of each expired lease, <base>lane:<group> of each lane job put back,
  <base>ended:<id> of each job that goes dead (a token there wakes its waiters).
  A job whose attempts >= max_attempts (its worker was lost at its last attempt) goes to dead at
  now with the error 'lease expired during attempt <n>: the worker was lost'; its lane is left as
  it is. Otherwise a flat job returns to pending at its enqueued_at; a lane job to the head of its
  lane (latest deadline pushed first, so the lane keeps their order). Ghosts are dropped from
  active. One wake token per job put back to run.
  Replies: :<jobs taken: back to run or dead> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM,
  TRYAGAIN errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "moves"
--- @include "numbers"
if #KEYS < 5 or #KEYS > 6 or #ARGV ~= 3 then return arity_error('RECOVER', 5, 3) end
local base = keys_base({ 'active', 'pending', 'ring', 'wake', 'dead' })
local _, events_key = optional_keys(base, 5, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end
local limit = int_arg(ARGV[2], 1)
if limit == nil then return number_error('limit', 1) end
local max_attempts = int_arg(ARGV[3], 1)
if max_attempts == nil then return number_error('max_attempts', 1) end
if not types_ok({ 'zset', 'zset', 'list', 'list', 'zset' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

return move_due(base, now, limit, max_attempts, nil, events_key)
