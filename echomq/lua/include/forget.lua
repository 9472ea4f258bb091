-- Forgetting dead jobs (purge, trim_dead): every id's row and ended key is checked before
-- anything is written; then each id leaves dead and both keys go, so the id may be admitted again.
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"

-- Nil when the row and the ended key of every id may be deleted here, else the error reply.
local function check_forgettable(base, ids)
  for i = 1, #ids do
    local row = base .. 'job:' .. ids[i]
    if not may_access(row) then return redis.error_reply(E_PERM) end
    if derived_type(row) == nil then return redis.error_reply(E_MOVING) end
    local err = check_ended(base .. 'ended:' .. ids[i])
    if err then return err end
  end
  return nil
end

-- The ids leave dead (zset), their rows and ended keys deleted; with events_key, a purged entry
-- each (at: the call's now, nil for purge).
local function forget_dead(base, dead, ids, events_key, at)
  for i = 1, #ids do
    local attempt = attempts_of_any(events_key, base .. 'job:' .. ids[i])
    redis.call('ZREM', dead, ids[i])
    redis.call('DEL', base .. 'job:' .. ids[i], base .. 'ended:' .. ids[i])
    emit(events_key, 'purged', ids[i], attempt, at)
  end
end
