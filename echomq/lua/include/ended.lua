-- A job's ended key, <base>ended:<id>: the token its waiters block on.
--- @include "derived"
--- @include "errors"
--- @include "numbers"

-- A job's ended key, <base>ended:<id>, derived from its id: readable and writable by the caller,
-- absent or a list, not on another node. Nil, or the error reply.
local function check_ended(key)
  if not may_access(key) then return redis.error_reply(E_PERM) end
  local t = derived_type(key)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'list' then return redis.error_reply(E_TYPE) end
  return nil
end

-- A job has ended (done keeping a result, or dead): its ended key holds one token, which wakes
-- every client blocked on it (BLMOVE key key: the token stays). With retention_ms it expires with
-- the tombstone; a dead job's stays until requeue or purge takes the job out of dead.
local function mark_ended(key, retention_ms)
  if redis.call('LLEN', key) == 0 then redis.call('RPUSH', key, '1') end
  if retention_ms then redis.call('PEXPIRE', key, dec(retention_ms)) end
end
