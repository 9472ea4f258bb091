-- The effects of ack and retry on a current lease, and of any settlement on a flagged one.
--- @include "cancelled"
--- @include "ended"
--- @include "events"
--- @include "lane_slots"
--- @include "numbers"
--- @include "rows"

local RESULT_MAX = 524288

-- A result an ack keeps: any bytes, at most RESULT_MAX of them.
local function result_ok(result)
  return #result <= RESULT_MAX
end

-- The bytes the results a call keeps may still take before the server is over maxmemory: nil
-- until the call's first result to keep reads INFO memory (maxmemory less used_memory less
-- mem_not_counted_for_evict, as the server counts it; false: no bound, maxmemory 0 or INFO
-- refused).
local result_room = nil

-- Whether result fits in the call's room (read at its first result), taking it from the room; an
-- empty result always fits.
local function result_fits(result)
  if result_room == nil then
    local info = redis.pcall('INFO', 'memory')
    local max = type(info) == 'string' and tonumber(string.match(info, '\nmaxmemory:(%d+)'))
    if max and max > 0 then
      local used = tonumber(string.match(info, '\nused_memory:(%d+)')) or 0
      local uncounted = tonumber(string.match(info, '\nmem_not_counted_for_evict:(%d+)')) or 0
      result_room = max - math.max(used - uncounted, 0)
    else
      result_room = false
    end
  end
  if result_room == false then return true end
  if #result > math.max(result_room, 0) then return false end
  result_room = result_room - #result
  return true
end

-- ack's effect on a current lease: leave active; the row becomes a tombstone for retention_ms
-- (0: deleted), holding result when one is given and it fits in the call's room (result_fits;
-- else the tombstone's result_dropped field says memory), and then the job's ended key (ended)
-- wakes its waiters. With events_key, a done entry (at: the call's now, nil for ack). Returns
-- the verdict.
local function finish_ack(active, row, id, retention_ms, result, ended, events_key, fence, at)
  local attempt = attempts_of(events_key, row)
  redis.call('ZREM', active, id)
  release_lane_slot(string.sub(active, 1, -7), row)
  if retention_ms == 0 then
    redis.call('DEL', row)
  else
    if result ~= nil and result_fits(result) then
      redis.call('HSET', row, 'result', result)
    elseif result ~= nil then
      redis.call('HSET', row, 'result_dropped', 'memory')
    end
    drop_payload(row)
    redis.call('PEXPIRE', row, dec(retention_ms))
    if result ~= nil then mark_ended(ended, retention_ms) end
  end
  emit(events_key, 'done', id, attempt, at, 'fence', dec(fence))
  return 'ACKED'
end

-- retry's effect on a current lease: leave active, record the error, go dead when the row's
-- attempts reach max_attempts (its ended key then wakes its waiters), else wait in delayed until
-- now + delay_ms. With events_key, a retried or dead entry. Returns the verdict.
local function finish_retry(active, delayed, dead, row, id, error, delay_ms, max_attempts, now,
                            ended, events_key, fence)
  redis.call('ZREM', active, id)
  release_lane_slot(string.sub(active, 1, -7), row)
  redis.call('HSET', row, 'error', error)
  local attempts = int_field(row_field(row, 'a'), 0)
  if attempts >= max_attempts then
    redis.call('ZADD', dead, dec(now), id)
    mark_ended(ended, nil)
    emit(events_key, 'dead', id, attempts, now, 'fence', dec(fence))
    return 'DEAD'
  end
  redis.call('ZADD', delayed, dec(now + delay_ms), id)
  emit(events_key, 'retried', id, attempts, now, 'fence', dec(fence), 'due', dec(now + delay_ms))
  return 'RETRYING'
end

-- A lease a cancel flagged: its row carries the cancel mark.
local function flagged(row)
  return redis.call('HEXISTS', row, 'cancel') == 1
end

-- Any settlement's effect (ack, ack with a result, retry, release) on a current lease a cancel
-- flagged: the attempt ends as cancelled — leave active, the lane slot given back, the job
-- buried with the retention its flag carries (no result kept, no retry, never dead). Returns the
-- verdict. With events_key, a cancelled entry (at: the call's now, nil for ack).
local function finish_cancelled(active, row, id, ended, events_key, fence, at)
  local attempt = attempts_of(events_key, row)
  redis.call('ZREM', active, id)
  release_lane_slot(string.sub(active, 1, -7), row)
  local verdict = bury_cancelled(row, ended, int_field(redis.call('HGET', row, 'cancel'), 0))
  emit(events_key, 'cancelled', id, attempt, at, 'fence', dec(fence))
  return verdict
end
