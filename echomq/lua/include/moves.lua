-- Jobs due by now going back to run (recover, promote) or out of dead (requeue).
--- @include "cancelled"
--- @include "dependents"
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"
--- @include "lane_slots"
--- @include "lanes"
--- @include "leases"
--- @include "numbers"
--- @include "priority"
--- @include "rows"
--- @include "wake"

-- First pass of recover/promote/requeue: sort due ids into live moves and ghosts, checking every
-- derived key before anything is written. With max_attempts (recover), a lease a cancel flagged
-- ends cancelled (its ended key checked), and a job whose attempts are
-- used up is marked spent: it goes dead, so its lane is not looked at, and its ended key is
-- checked. Returns moves, ghosts or nil, error reply.
local function plan_moves(base, ids, fallback_score, max_attempts)
  local moves, ghosts = {}, {}
  for i = 1, #ids, 2 do
    local id, score = ids[i], ids[i + 1]
    local row = base .. 'job:' .. id
    if not may_access(row) then return nil, redis.error_reply(E_PERM) end
    local row_type = derived_type(row)
    if row_type == nil then return nil, redis.error_reply(E_MOVING) end
    if row_type == 'hash' then
      local move = { id = id, row = row, score = score }
      local lane, attempts
      if max_attempts then -- a lease leaving active: its row read once (read_lease)
        move.read = read_lease(row)
        known_lane(row, move.read.lane)
        local failure = check_lane_bookkeeping(base, row)
        if failure then return nil, failure end
        lane, attempts = move.read.lane, int_field(move.read.attempts, 0)
      else
        lane = redis.call('HGET', row, 'lane')
      end
      if max_attempts and move.read.cancel then
        move.cancelled = true
        move.ended = base .. 'ended:' .. id
        local err = check_ended(move.ended)
        if err then return nil, err end
      elseif attempts and attempts >= max_attempts then
        move.spent = attempts
        move.ended = base .. 'ended:' .. id
        local err = check_ended(move.ended)
        if err then return nil, err end
      else -- back to run, in its priority's band: at its enqueued_at (recover), else at score,
        -- whose integer part is taken, never below 0 (a due score set behind the queue's back:
        -- -inf, 1.5)
        local at = math.max(math.floor(tonumber(score)), 0)
        if fallback_score ~= nil then
          at = int_field(row_field(row, 't'), fallback_score)
        end
        if lane then -- into its lane: the list at priority 0, else its prio zset (push_lane)
          local failure = check_lane_keys(base, lane)
          if failure then return nil, failure end
          move.lane, move.lane_key = lane, base .. 'lane:' .. lane
          move.priority, move.at = row_priority(row), at
        else
          move.score = dec(pending_score(row_priority(row), at))
        end
      end
      moves[#moves + 1] = move
    else
      ghosts[#ghosts + 1] = id
    end
  end
  return moves, ghosts
end

-- recover and promote, once their call is checked: the entries of KEYS[1] due by now (at most
-- limit) go back to run; ghosts are dropped from KEYS[1]. recover (max_attempts given) returns flat
-- jobs to pending at their enqueued_at (in their priority's band) and lane jobs to their lane's
-- head, latest deadline first so the lane keeps their order, and sends a job whose attempts are
-- used up to dead (KEYS[5]); promote returns flat jobs at their due time (in their priority's
-- band) and lane jobs to their lane's tail, in due order. Replies the jobs taken (back to run or
-- dead); wake tokens only for those back to run. With events_key, an entry per job taken, in the
-- order they are applied.
local function move_due(base, now, limit, max_attempts, check, events_key)
  local recover = max_attempts ~= nil
  local from, pending, ring, wake_key, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', dec(now), 'WITHSCORES', 'LIMIT', '0',
    dec(limit))
  local moves, ghosts = plan_moves(base, due, recover and now or nil, max_attempts)
  if moves == nil then return ghosts end
  local join = recover and new_join(base, now, events_key)
  if recover then -- the end hooks (include/dependents.lua), in the order the moves apply
    for i = #moves, 1, -1 do
      local move, failure = moves[i], nil
      if move.cancelled then
        move.from, move.to, failure = plan_hook(join, move.id, move.row, 'cancelled',
          mark_of(move.row), move.read)
      elseif move.spent then
        move.from, move.to, failure = plan_hook(join, move.id, move.row, 'dead',
          'lease expired during attempt ' .. dec(move.spent) .. ': the worker was lost', move.read)
      end
      if failure then return failure end
    end
  end
  if check then
    local failure = check()
    if failure then return failure end
  end
  for i = 1, #ghosts do redis.call('ZREM', from, ghosts[i]) end
  local first, last, step, push = 1, #moves, 1, 'RPUSH'
  if recover then first, last, step, push = #moves, 1, -1, 'LPUSH' end
  local back = 0
  for i = first, last, step do
    local move = moves[i]
    local attempt = attempts_of(events_key, move.row)
    redis.call('ZREM', from, move.id)
    if recover then release_lane_slot(base, move.row) end
    if move.cancelled then
      bury_cancelled(move.row, move.ended, int_field(redis.call('HGET', move.row, 'cancel'), 0))
      emit(events_key, 'cancelled', move.id, attempt, now)
    elseif move.spent then
      redis.call('HSET', move.row, 'error',
        'lease expired during attempt ' .. dec(move.spent) .. ': the worker was lost')
      redis.call('ZADD', dead, dec(now), move.id)
      mark_ended(move.ended, nil)
      emit(events_key, 'dead', move.id, move.spent, now)
    end
    if move.from then apply_steps(join, move.from, move.to) end
    if move.cancelled or move.spent then -- ended: nothing more
    elseif move.lane then
      push_lane(ring, move, push)
      back = back + 1
      emit(events_key, recover and 'recovered' or 'promoted', move.id, attempt, now, 'lane', move.lane)
    else
      redis.call('ZADD', pending, move.score, move.id)
      back = back + 1
      emit(events_key, recover and 'recovered' or 'promoted', move.id, attempt, now)
    end
  end
  wake(wake_key, back)
  return #moves
end
