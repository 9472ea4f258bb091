--[[
  lane_set: set a group's knobs, or the queue's defaults (group *), then put each group they
  touch where its limits now say: a group whose limits were raised above what it holds comes back
  to the ring's tail, one whose limits were lowered under it leaves the ring. Changing the
  defaults looks at the parked groups only (one raised back), in byte order of their names; a
  group in the ring over a lowered default is parked by the lane claim that reaches it. Scripts
  only: an operator's tool.
    KEYS[1] <base>ring       groups whose lanes are non-empty and not parked (list)
    KEYS[2] <base>laneconf   knobs: <knob> the queue's default, <knob>:<group> a group's (hash)
    KEYS[3] <base>leased     leases held per group (hash)
    KEYS[4] <base>parked     why a group is out of the ring (hash)
    KEYS[5] <base>throttled  groups over their rate, score = when their window opens (zset)
    KEYS[6] <base>windows    each rate-limited group's window (hash)
    KEYS[7] <base>turn       the ring head's claims in its turn (string)
    ARGV[1] scope            a group, or * for the queue's defaults
    ARGV[2] concurrency      leases a group may hold at once
    ARGV[3] rate             claims a group may have per window
    ARGV[4] window_ms        the rate's window (default 1000)
    ARGV[5] weight           claims a group has per turn of the ring (default 1)
    ARGV[6] now              ms, or * for the server clock
  Each knob is an integer from 1 to 999999999999999, - to clear it (a group then follows the
  queue's default; a default cleared is no limit) or = to keep it.
  Derived: <base>lane:<group> and <base>prio:<group> of each group looked at, then
  <base>ringleft (hash): a group leaves the ring and comes back as on lane pause.
  Replies: +OK | EMQARITY, EMQLANE, EMQKEYS, EMQNUM, WRONGTYPE errors.
]]
--- @include "args"
--- @include "errors"
--- @include "keys"
--- @include "lane_limits"
--- @include "lanes"
--- @include "numbers"
if #KEYS ~= 7 or #ARGV ~= 6 then return arity_error('LANE_SET', 7, 6) end
local scope = ARGV[1]
if scope ~= '*' and not lane_ok(scope) then return redis.error_reply(E_LANE) end
local base = keys_base({ 'ring', 'laneconf', 'leased', 'parked', 'throttled', 'windows', 'turn' })
if base == nil then return redis.error_reply(E_KEYS) end
local knobs = { 'concurrency', 'rate', 'window_ms', 'weight' }
for i = 1, #knobs do
  local v = ARGV[i + 1]
  if v ~= '=' and v ~= '-' and int_arg(v, 1) == nil then
    return redis.error_reply('EMQNUM ' .. knobs[i] ..
      ' must be = (keep), - (clear) or an integer from 1 to 999999999999999')
  end
end
local now = now_arg(ARGV[6])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'list', 'hash', 'hash', 'hash', 'zset', 'hash', 'string' }) then
  return redis.error_reply(E_TYPE)
end

local groups = { scope }
if scope == '*' then
  -- In byte order (not the locale's, as Lua's < on strings): a hash's own order depends on its
  -- encoding and on the server's hash seed.
  groups = redis.call('HKEYS', KEYS[4])
  table.sort(groups, function(a, b)
    for i = 1, math.min(#a, #b) do
      local x, y = string.byte(a, i), string.byte(b, i)
      if x ~= y then return x < y end
    end
    return #a < #b
  end)
end
for i = 1, #groups do
  local failure = check_lane_keys(base, groups[i])
  if failure then return failure end
end
local left_failure = check_ring_left(base)
if left_failure then return left_failure end

for i = 1, #knobs do
  local field = knobs[i]
  if scope ~= '*' then field = field .. ':' .. scope end
  if ARGV[i + 1] == '-' then
    redis.call('HDEL', KEYS[2], field)
  elseif ARGV[i + 1] ~= '=' then
    redis.call('HSET', KEYS[2], field, ARGV[i + 1])
  end
end
for i = 1, #groups do lane_refresh(base, groups[i], now) end
return redis.status_reply('OK')
