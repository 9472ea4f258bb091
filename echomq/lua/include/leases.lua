-- Whether a lease is current, and what a settlement of one that is not answers.
--- @include "numbers"
--- @include "rows"

-- The current lease: the id is in active and the row's fence equals the given fence (an absent
-- row has no fence, and a lease's fence is at least 1).
local function is_current_lease(active, row, id, fence)
  if redis.call('ZSCORE', active, id) == false then return false end
  local f = row_field(row, 'f')
  return f ~= false and int_field(f, 0) == fence
end

-- A settlement's one read of its lease's row, before anything is written: the fields the
-- transition and its end hook use (fence, the cancel flag, the lane, attempts, then next,
-- dedupe and dedupe_ms for the end hook), each false when absent; a row of the earlier layout's
-- fence and attempts read by those names (row_fields).
local function read_lease(row)
  local f = row_fields(row, 'f', 'cancel', 'lane', 'a', 'next', 'dedupe', 'dedupe_ms')
  return { fence = f[1], cancel = f[2], lane = f[3], attempts = f[4], next = f[5], dedupe = f[6],
           dedupe_ms = f[7] }
end

-- is_current_lease on the row as read_lease found it.
local function is_lease_read(active, id, fence, r)
  if r.fence == false or int_field(r.fence, 0) ~= fence then return false end
  return redis.call('ZSCORE', active, id) ~= false
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
  if int_field(row_field(row, 'f'), 0) ~= fence then return false end
  return not has_payload(row) and redis.call('HEXISTS', row, 'cancelled') == 1
end

-- What a lease that is not current answers when its settlement went through already: a replay
-- (docs/PROTOCOL.md, Replays). A flagged lease's settlement left a cancelled tombstone at the
-- lease's fence: CANCELLED. An ack (error nil) left the tombstone, a row without payload
-- (only an ack removes it) at the lease's fence, expiring: ACKED. A retry left the row at that fence with
-- its error: DEAD while it is in dead, else RETRYING. Fences never repeat, so no other lease
-- leaves a row so; anything else is STALE. Reads only.
local function replayed(row, fence, error, dead, id)
  if redis.call('EXISTS', row) == 0 then return 'STALE' end
  if int_field(row_field(row, 'f'), 0) ~= fence then return 'STALE' end
  local live = has_payload(row)
  if not live and redis.call('HEXISTS', row, 'cancelled') == 1 then return 'CANCELLED' end
  if error == nil then
    if live or redis.call('PTTL', row) < 0 then return 'STALE' end
    return 'ACKED'
  end
  if not live or redis.call('HGET', row, 'error') ~= error then return 'STALE' end
  if redis.call('ZSCORE', dead, id) ~= false then return 'DEAD' end
  return 'RETRYING'
end
