--[[
  extend_many: a heartbeat for many leases in one call; each pair is extend's.
    KEYS[1] <base>active     leased jobs (zset)
    ARGV[1] lease_ms         integer >= 1
    ARGV[2] now              ms, or * for the server clock
    ARGV[3..] pairs          `<id> <fence>`, each a lease to push to now + lease_ms
  Derived: <base>job:<id> of every pair's id.
  Replies: [+EXTENDED | +STALE per pair] | EMQARITY, EMQKEYS, EMQNUM, EMQITEM, EMQKIND,
  WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "derived"
--- @include "errors"
--- @include "keys"
--- @include "leases"
--- @include "numbers"
if #KEYS ~= 1 or #ARGV < 2 then return variadic_arity_error('EXTEND_MANY', 1, 2) end
local base = keys_base({ 'active' })
if base == nil then return redis.error_reply(E_KEYS) end
local lease_ms = int_arg(ARGV[1], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end

local leases = {}
for i = 3, #ARGV, 2 do
  local n = #leases + 1
  if i + 1 > #ARGV then return item_error(n, '<id> <fence>') end
  local id = ARGV[i]
  if not id_ok(id) then return redis.error_reply(E_KIND) end
  local fence = int_arg(ARGV[i + 1], 1)
  if fence == nil then return number_error('fence', 1) end
  leases[n] = { id = id, fence = fence }
end
if not types_ok({ 'zset' }) then return redis.error_reply(E_TYPE) end

local active = KEYS[1]
for n = 1, #leases do
  leases[n].row = base .. 'job:' .. leases[n].id
  local err = check_row(leases[n].row)
  if err then return err end
end
local verdicts = {}
local deadline = dec(now + lease_ms)
for n = 1, #leases do
  local held = leases[n]
  if is_current_lease(active, held.row, held.id, held.fence) then
    redis.call('ZADD', active, deadline, held.id)
    verdicts[n] = redis.status_reply(extended(held.row))
  else
    verdicts[n] = redis.status_reply('STALE')
  end
end
return verdicts
