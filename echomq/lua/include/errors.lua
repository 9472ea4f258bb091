-- The error replies every executor answers with, byte for byte the texts of the error table in
-- echomq/transitions.py (tests/test_error_table.py checks them against it).
local E_KIND = 'EMQKIND job id must be JOB:<rest> with <rest> 1 to 200 bytes of A-Z a-z 0-9 . _ : -'
local E_KEYS = "EMQKEYS keys must be one queue's keys in the documented order"
local E_TYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_PERM = 'NOPERM No permissions to access a key'
local E_NOW = 'EMQNUM now must be * or an integer from 0 to 999999999999999'
local E_MOVING = "TRYAGAIN a job's keys are moving between cluster nodes; try again"
local E_LANE = 'EMQLANE lane must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -'
local E_FENCE = 'EMQFENCE the fence counter must hold an integer from 0 to 999999999999998'
local E_RESULT = 'EMQSIZE result must be at most 524288 bytes'
local E_PROGRESS = 'EMQSIZE progress must be at most 65536 bytes'
local E_PRIORITY = 'EMQNUM priority must be an integer from -100 to 100'
local E_POLICY = 'EMQPOLICY policy must be fail, ignore or continue'
local E_MODE = 'EMQMODE mode must be dedupe, debounce or throttle'

local function arity_error(verb, nkeys, nargs)
  return redis.error_reply(string.format('EMQARITY EMQ.%s takes %d keys and %d arguments',
    verb, nkeys, nargs))
end

-- A transition whose last arguments may be left off: nargs to nmax of them.
local function optional_arity_error(verb, nkeys, nargs, nmax)
  return redis.error_reply(string.format('EMQARITY EMQ.%s takes %d keys and %d or %d arguments',
    verb, nkeys, nargs, nmax))
end

-- A transition taking a list of items after its fixed arguments.
local function variadic_arity_error(verb, nkeys, nargs)
  return redis.error_reply(string.format('EMQARITY EMQ.%s takes %d keys and at least %d arguments',
    verb, nkeys, nargs))
end

-- Item n (from 1) of a list is not of the documented shape.
local function item_error(n, shape)
  return redis.error_reply(string.format('EMQITEM item %d must be %s', n, shape))
end

local function number_error(name, min)
  return redis.error_reply(string.format('EMQNUM %s must be an integer from %d to 999999999999999',
    name, min))
end

-- A bounded list (enqueue_many's jobs) longer than its bound: at most nmax items.
local function many_error(verb, nmax)
  return redis.error_reply(string.format('EMQARITY EMQ.%s takes at most %d items', verb, nmax))
end
