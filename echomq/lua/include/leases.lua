-- Whether a lease is current, and what a settlement of one that is not answers.
--- @include "numbers"

-- The current lease: the id is in active and the row's fence equals the given fence.
local function is_current_lease(active, row, id, fence)
  if redis.call('ZSCORE', active, id) == false then return false end
  if redis.call('EXISTS', row) == 0 then return false end
  return int_field(redis.call('HGET', row, 'f'), 0) == fence
end

-- What an extend of a current lease answers: CANCELLING when a cancel flagged its row (the lease
-- is extended all the same, so its holder can wind down), else EXTENDED.
local function extended(row)
  if redis.call('HEXISTS', row, 'cancel') == 1 then return 'CANCELLING' end
  return 'EXTENDED'
end

-- A cancelled tombstone (no payload, the cancel mark) at the lease's fence: what a flagged
-- lease's settlement leaves.
local function cancelled_at(row, fence)
  if redis.call('EXISTS', row) == 0 then return false end
  if int_field(redis.call('HGET', row, 'f'), 0) ~= fence then return false end
  return redis.call('HEXISTS', row, 'p') == 0 and redis.call('HEXISTS', row, 'cancelled') == 1
end

-- What a lease that is not current answers when its settlement went through already: a replay
-- (docs/PROTOCOL.md, Replays). A flagged lease's settlement left a cancelled tombstone at the
-- lease's fence: CANCELLED. An ack (error nil) left the tombstone, a row without payload
-- (only an ack removes it) at the lease's fence, expiring: ACKED. A retry left the row at that fence with
-- its error: DEAD while it is in dead, else RETRYING. Fences never repeat, so no other lease
-- leaves a row so; anything else is STALE. Reads only.
local function replayed(row, fence, error, dead, id)
  if redis.call('EXISTS', row) == 0 then return 'STALE' end
  if int_field(redis.call('HGET', row, 'f'), 0) ~= fence then return 'STALE' end
  local has_payload = redis.call('HEXISTS', row, 'p') == 1
  if not has_payload and redis.call('HEXISTS', row, 'cancelled') == 1 then return 'CANCELLED' end
  if error == nil then
    if has_payload or redis.call('PTTL', row) < 0 then return 'STALE' end
    return 'ACKED'
  end
  if not has_payload or redis.call('HGET', row, 'error') ~= error then return 'STALE' end
  if redis.call('ZSCORE', dead, id) ~= false then return 'DEAD' end
  return 'RETRYING'
end
