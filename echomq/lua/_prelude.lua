--[[
  Shared prelude, prepended to every transition script by echomq/scripts.py before it is loaded.
  It defines local helpers only; each transition file uses them and defines nothing global.
  Every helper mirrors a function of native/emq_core.c or of the trafikey module: the two executors
  validate in the same order and reply with the same bytes (see docs/PROTOCOL.md).
]]
local WAKE_CAP = 64
local E_KIND = 'EMQKIND job id must be JOB:<rest> with <rest> 1 to 200 bytes of A-Z a-z 0-9 . _ : -'
local E_KEYS = "EMQKEYS keys must be one queue's keys in the documented order"
local E_TYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_PERM = 'NOPERM No permissions to access a key'
local E_NOW = 'EMQNUM now must be * or an integer from 0 to 999999999999999'
local E_MOVING = "TRYAGAIN a job's keys are moving between cluster nodes; try again"
local E_LANE = 'EMQLANE lane must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -'
local E_FENCE = 'EMQFENCE the fence counter must hold an integer from 0 to 999999999999998'
local FENCE_MAX = 999999999999998
local RESULT_MAX = 524288
local E_RESULT = 'EMQSIZE result must be at most 524288 bytes'

local function arity_error(verb, nkeys, nargs)
  return redis.error_reply(string.format('EMQARITY EMQ.%s takes %d keys and %d arguments',
    verb, nkeys, nargs))
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
local SETTLE_ITEM =
  'ack <id> <fence>, done <id> <fence> <result>, release <id> <fence> or retry <id> <fence> <delay_ms> <max_attempts> <error>'

local function number_error(name, min)
  return redis.error_reply(string.format('EMQNUM %s must be an integer from %d to 999999999999999',
    name, min))
end

-- The kind gate: JOB:<rest>, rest 1..200 bytes of [A-Za-z0-9._:-].
local function id_ok(id)
  local n = #id
  if n < 5 or n > 204 or string.sub(id, 1, 4) ~= 'JOB:' then return false end
  return string.find(id, '^[A-Za-z0-9._:-]+$', 5) ~= nil
end

-- A lane (group) name: 1..200 bytes of [A-Za-z0-9._:-].
local function lane_ok(group)
  return #group <= 200 and string.find(group, '^[A-Za-z0-9._:-]+$') ~= nil
end

-- An integer argument: 1..15 ASCII digits, at least min; nil otherwise.
local function int_arg(s, min)
  if #s < 1 or #s > 15 or string.find(s, '^[0-9]+$') == nil then return nil end
  local v = tonumber(s)
  if v < min then return nil end
  return v
end

-- A row field read as a count: absent or not an integer counts as the fallback.
local function int_field(v, fallback)
  if v == false then return fallback end
  return int_arg(v, 0) or fallback
end

local function now_arg(s)
  if s == '*' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return int_arg(s, 0)
end

local function dec(v)
  return string.format('%d', v)
end

-- The base of the queue if KEYS are base..suffixes[i] in order, else nil.
local function keys_base(suffixes)
  local first, suffix = KEYS[1], suffixes[1]
  local n, m = #first, #suffix
  if n < m or string.sub(first, n - m + 1) ~= suffix then return nil end
  local base = string.sub(first, 1, n - m)
  for i = 2, #suffixes do
    if KEYS[i] ~= base .. suffixes[i] then return nil end
  end
  return base
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

-- True when every declared key is absent or of its expected type.
local function types_ok(expected)
  for i = 1, #expected do
    local t = key_type(KEYS[i])
    if t ~= 'none' and t ~= expected[i] then return false end
  end
  return true
end

-- False when the cluster refuses a call naming two keys of the slot, the absent derived key and
-- a declared one: the server answers such a call only while the slot is stable (on a node that
-- imports or exports the slot, a call of several keys not all present is refused), so an absent
-- key may still be on the other node. trafikey's moved_away asks the same question.
local function slot_is_stable(key)
  return type(redis.pcall('EXISTS', key, KEYS[1])) == 'number'
end

-- The type of a derived key, or nil when it may be on another node: the cluster refuses to
-- touch it (it left with its slot), or it is absent while the slot moves (not migrated yet).
local function derived_type(key)
  local reply = redis.pcall('TYPE', key)
  if reply['err'] ~= nil then return nil end
  if reply['ok'] == 'none' and not slot_is_stable(key) then return nil end
  return reply['ok']
end

-- A derived key must be readable and writable by the caller, as a declared key would be.
local function may_access(key)
  return redis.acl_check_cmd('HINCRBY', key, 'attempts', '1')
end

-- A derived key the call reads or writes: readable and writable by the caller, absent or of the
-- expected type, not on another node. Nil, or the error reply.
local function check_derived(key, expected)
  if not may_access(key) then return redis.error_reply(E_PERM) end
  local t = derived_type(key)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= expected then return redis.error_reply(E_TYPE) end
  return nil
end

-- An item's row, derived from its id: readable and writable by the caller, absent or a hash, not
-- on another node. Nil, or the error reply.
local function check_row(row)
  if not may_access(row) then return redis.error_reply(E_PERM) end
  local t = derived_type(row)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'hash' then return redis.error_reply(E_TYPE) end
  return nil
end

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

-- The current lease: the id is in active and the row's fence equals the given fence.
local function is_current_lease(active, row, id, fence)
  if redis.call('ZSCORE', active, id) == false then return false end
  if redis.call('EXISTS', row) == 0 then return false end
  return int_field(redis.call('HGET', row, 'fence'), 0) == fence
end

-- What a lease that is not current answers when its settlement went through already: a replay
-- (docs/PROTOCOL.md, Replays). An ack (error nil) left the tombstone, a row without payload
-- (only an ack removes it) at the lease's fence, expiring: ACKED. A retry left the row at that fence with
-- its error: DEAD while it is in dead, else RETRYING. Fences never repeat, so no other lease
-- leaves a row so; anything else is STALE. Reads only.
local function replayed(row, fence, error, dead, id)
  if redis.call('EXISTS', row) == 0 then return 'STALE' end
  if int_field(redis.call('HGET', row, 'fence'), 0) ~= fence then return 'STALE' end
  local has_payload = redis.call('HEXISTS', row, 'payload') == 1
  if error == nil then
    if has_payload or redis.call('PTTL', row) < 0 then return 'STALE' end
    return 'ACKED'
  end
  if not has_payload or redis.call('HGET', row, 'error') ~= error then return 'STALE' end
  if redis.call('ZSCORE', dead, id) ~= false then return 'DEAD' end
  return 'RETRYING'
end

-- The value of the queue's fence counter (absent: 0), or nil when it holds anything else than
-- an integer the next claim can still count up from.
local function fence_counter(key)
  local value = redis.call('GET', key)
  if value == false then return 0 end
  local n = int_arg(value, 0)
  if n == nil or n > FENCE_MAX then return nil end
  return n
end

-- Lease a job: count the attempt, take the next fence (SET, so a replica copies the value the
-- lease was given), put the id in active until now + lease_ms. Returns attempt, fence.
local function lease(row, id, active, fence_key, last_fence, deadline)
  local attempt = int_field(redis.call('HGET', row, 'attempts'), 0) + 1
  local fence = last_fence + 1
  redis.call('SET', fence_key, dec(fence))
  redis.call('HSET', row, 'attempts', dec(attempt), 'fence', dec(fence))
  redis.call('ZADD', active, dec(deadline), id)
  return attempt, fence
end

-- The walk of claim, for up to count jobs: from pending's lowest entry, live rows to lease and
-- ghosts (no row, or a row of another type) to drop, every row checked before anything is
-- written. Returns claims ({id, row} each), ghosts, or nil, nil, the error reply.
local function plan_claims(base, pending, count)
  local claims, ghosts = {}, {}
  local rank = 0
  while #claims < count do
    local head = redis.call('ZRANGE', pending, rank, rank)
    if #head == 0 then break end
    local row = base .. 'job:' .. head[1]
    if not may_access(row) then return nil, nil, redis.error_reply(E_PERM) end
    local row_type = derived_type(row)
    if row_type == nil then return nil, nil, redis.error_reply(E_MOVING) end
    if row_type == 'hash' then
      claims[#claims + 1] = { id = head[1], row = row }
    else
      ghosts[#ghosts + 1] = head[1]
    end
    rank = rank + 1
  end
  return claims, ghosts
end

-- Lanes' limits. A group whose lane is non-empty is in the ring exactly once unless it is parked:
-- <base>parked holds, per group, why it is out of the ring (bits: at its concurrency limit, over
-- its rate until its window opens, paused). Knobs live in <base>laneconf: `<knob>` is the queue's
-- default, `<knob>:<group>` a group's override. <base>leased counts each group's leases held,
-- <base>windows each rate-limited group's window ('<start> <claims>'), <base>throttled when each
-- window over its rate opens, <base>turn how often the ring's head was served in its turn.
local PARKED_FULL, PARKED_RATE, PARKED_PAUSED = 1, 2, 4
local DEFAULT_WINDOW_MS = 1000

local KNOBS = { 'concurrency', 'rate', 'window_ms', 'weight' }
local KNOB_FALLBACK = { window_ms = DEFAULT_WINDOW_MS, weight = 1 }

-- A group's knobs as they apply: its own, else the queue's default; absent (or not an integer
-- from 1): no limit (nil), a window of 1000 ms, a weight of 1. (HGET, not HMGET: the commands a
-- script runs must be allowed to its user, and HGET already is.)
local function lane_knobs(base, group)
  local conf, knobs = base .. 'laneconf', {}
  for i = 1, #KNOBS do
    local v = redis.call('HGET', conf, KNOBS[i] .. ':' .. group)
    if v == false then v = redis.call('HGET', conf, KNOBS[i]) end
    knobs[KNOBS[i]] = (v and int_arg(v, 1)) or KNOB_FALLBACK[KNOBS[i]]
  end
  return knobs
end

-- Whether the whole queue is paused (<base>paused exists), the flag checked as a derived key (the
-- caller's ACL, a slot that moves): true or false, or nil and the error reply.
local function queue_paused(base)
  local key = base .. 'paused'
  if not may_access(key) then return nil, redis.error_reply(E_PERM) end
  local t = derived_type(key)
  if t == nil then return nil, redis.error_reply(E_MOVING) end
  return t ~= 'none'
end

local function parked_mask(base, group)
  return int_field(redis.call('HGET', base .. 'parked', group), 0)
end

-- A group's rate window at now: its start and the claims counted in it (a new window when the
-- last one has passed).
local function lane_window(base, group, now, window_ms)
  local v = redis.call('HGET', base .. 'windows', group)
  if v then
    local start, count = string.match(v, '^(%d+) (%d+)$')
    if start and now < tonumber(start) + window_ms then return tonumber(start), tonumber(count) end
  end
  return now, 0
end

-- Why a group may not be served now: PARKED_FULL at its concurrency limit, PARKED_RATE when its
-- window's claims reached its rate (then also when the window opens), 0 when it may.
local function lane_over(base, group, now, knobs)
  knobs = knobs or lane_knobs(base, group)
  local bits, opens = 0, nil
  local limit = knobs.concurrency
  if limit and int_field(redis.call('HGET', base .. 'leased', group), 0) >= limit then
    bits = PARKED_FULL
  end
  if knobs.rate then
    local start, count = lane_window(base, group, now, knobs.window_ms)
    if count >= knobs.rate then bits, opens = bits + PARKED_RATE, start + knobs.window_ms end
  end
  return bits, opens
end

-- A group's lane holds jobs (a lane key of another type holds none: it is not touched).
local function lane_nonempty(base, group)
  local lane_key = base .. 'lane:' .. group
  return key_type(lane_key) == 'list' and redis.call('LLEN', lane_key) > 0
end

-- The ring's head group leaves the ring; its turn ends.
local function ring_drop_head(base)
  redis.call('LPOP', base .. 'ring')
  redis.call('DEL', base .. 'turn')
end

-- Set a group's parked bits (0: not parked) and keep the ring true to them: a non-empty lane
-- joins the ring's tail when it is no longer parked, and leaves it (LREM) when it becomes
-- parked unless leave_ring is false (the caller popped it from the head already).
local function set_parked(base, group, mask, opens, leave_ring)
  local was = parked_mask(base, group)
  if mask == 0 then
    redis.call('HDEL', base .. 'parked', group)
  else
    redis.call('HSET', base .. 'parked', group, dec(mask))
  end
  if bit.band(mask, PARKED_RATE) ~= 0 and opens then
    redis.call('ZADD', base .. 'throttled', dec(opens), group)
  elseif bit.band(mask, PARKED_RATE) == 0 and bit.band(was, PARKED_RATE) ~= 0 then
    redis.call('ZREM', base .. 'throttled', group)
  end
  if not lane_nonempty(base, group) then return end
  if was ~= 0 and mask == 0 then
    redis.call('RPUSH', base .. 'ring', group)
  elseif was == 0 and mask ~= 0 and leave_ring ~= false then
    redis.call('LREM', base .. 'ring', 0, group)
    local turn = redis.call('GET', base .. 'turn')
    if turn and string.match(turn, '^%d+ (.*)$') == group then redis.call('DEL', base .. 'turn') end
  end
end

-- Recompute a group's limit bits (its pause bit kept) from its knobs and state at now.
local function lane_refresh(base, group, now)
  local paused = bit.band(parked_mask(base, group), PARKED_PAUSED)
  local bits, opens = lane_over(base, group, now)
  set_parked(base, group, paused + bits, opens)
end

-- The keys a lane job's lease touches when it leaves active (the ring, the knobs, the leases
-- held, the parked groups, and the group's lane when the group is parked at its limit: it may
-- come back to the ring if its lane holds jobs), checked as derived keys before anything is
-- written: nil, or the error reply. Nothing is checked for a flat job.
local LANE_BOOKKEEPING = { { 'ring', 'list' }, { 'laneconf', 'hash' }, { 'leased', 'hash' },
  { 'parked', 'hash' } }
local function check_lane_bookkeeping(base, row)
  local group = redis.call('HGET', row, 'lane')
  if not group then return nil end
  for i = 1, #LANE_BOOKKEEPING do
    local key = base .. LANE_BOOKKEEPING[i][1]
    if not may_access(key) then return redis.error_reply(E_PERM) end
    local t = derived_type(key)
    if t == nil then return redis.error_reply(E_MOVING) end
    if t ~= 'none' and t ~= LANE_BOOKKEEPING[i][2] then return redis.error_reply(E_TYPE) end
  end
  if bit.band(parked_mask(base, group), PARKED_FULL) == 0 then return nil end
  return check_derived(base .. 'lane:' .. group, 'list')
end

-- The keys promote reads and writes for the groups it reopens and the lane jobs it moves (the
-- groups over their rate, the parked groups), checked as derived keys before anything is written:
-- nil, or the error reply.
local function check_reopening(base)
  return check_derived(base .. 'throttled', 'zset') or check_derived(base .. 'parked', 'hash')
end

-- A lease of a lane job leaves active (acked, retried, dead, recovered, released): its group
-- holds one lease less, and comes back from its concurrency limit when below it.
local function release_lane_slot(base, row)
  local group = redis.call('HGET', row, 'lane')
  if not group then return end
  local held = int_field(redis.call('HGET', base .. 'leased', group), 0) - 1
  if held <= 0 then
    redis.call('HDEL', base .. 'leased', group)
  else
    redis.call('HSET', base .. 'leased', group, dec(held))
  end
  local mask = parked_mask(base, group)
  if bit.band(mask, PARKED_FULL) == 0 then return end
  local limit = lane_knobs(base, group).concurrency
  if limit == nil or held < limit then set_parked(base, group, mask - PARKED_FULL) end
end

-- The groups whose rate window has opened by now (at most limit), each lane key checked; nil and
-- the error reply when one cannot be touched. Promote calls it before it writes anything.
local function due_lanes(base, now, limit)
  local due = redis.call('ZRANGEBYSCORE', base .. 'throttled', '-inf', dec(now), 'LIMIT', '0',
    dec(limit))
  for i = 1, #due do
    local lane_key = base .. 'lane:' .. due[i]
    if not may_access(lane_key) then return nil, redis.error_reply(E_PERM) end
    local t = derived_type(lane_key)
    if t == nil then return nil, redis.error_reply(E_MOVING) end
    if t ~= 'none' and t ~= 'list' then return nil, redis.error_reply(E_TYPE) end
  end
  return due
end

-- The groups of due_lanes come back: each leaves throttled and loses its rate bit. How many.
local function reopen_lanes(base, due)
  for i = 1, #due do
    redis.call('ZREM', base .. 'throttled', due[i])
    local mask = parked_mask(base, due[i])
    if bit.band(mask, PARKED_RATE) ~= 0 then set_parked(base, due[i], mask - PARKED_RATE) end
  end
  return #due
end

-- A result an ack keeps: any bytes, at most RESULT_MAX of them.
local function result_ok(result)
  return #result <= RESULT_MAX
end

-- ack's effect on a current lease: leave active; the row becomes a tombstone for retention_ms
-- (0: deleted), holding result when one is given, and then the job's ended key (ended) wakes
-- its waiters. Returns the verdict.
local function finish_ack(active, row, id, retention_ms, result, ended)
  redis.call('ZREM', active, id)
  release_lane_slot(string.sub(active, 1, -7), row)
  if retention_ms == 0 then
    redis.call('DEL', row)
  else
    if result ~= nil then redis.call('HSET', row, 'result', result) end
    redis.call('HDEL', row, 'payload')
    redis.call('PEXPIRE', row, dec(retention_ms))
    if result ~= nil then mark_ended(ended, retention_ms) end
  end
  return 'ACKED'
end

-- retry's effect on a current lease: leave active, record the error, go dead when the row's
-- attempts reach max_attempts (its ended key then wakes its waiters), else wait in delayed until
-- now + delay_ms. Returns the verdict.
local function finish_retry(active, delayed, dead, row, id, error, delay_ms, max_attempts, now,
                            ended)
  redis.call('ZREM', active, id)
  release_lane_slot(string.sub(active, 1, -7), row)
  redis.call('HSET', row, 'error', error)
  if int_field(redis.call('HGET', row, 'attempts'), 0) >= max_attempts then
    redis.call('ZADD', dead, dec(now), id)
    mark_ended(ended, nil)
    return 'DEAD'
  end
  redis.call('ZADD', delayed, dec(now + delay_ms), id)
  return 'RETRYING'
end

-- Leave up to n wake tokens, never more than WAKE_CAP in the list.
local function wake(key, n)
  local room = WAKE_CAP - redis.call('LLEN', key)
  if n > room then n = room end
  for _ = 1, n do redis.call('RPUSH', key, '1') end
end

-- First pass of recover/promote/requeue: sort due ids into live moves and ghosts, checking every
-- derived key before anything is written. With max_attempts (recover), a job whose attempts are
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
      if max_attempts then
        local failure = check_lane_bookkeeping(base, row)
        if failure then return nil, failure end
      end
      local move = { id = id, row = row, score = score }
      local lane = redis.call('HGET', row, 'lane')
      local attempts = max_attempts and int_field(redis.call('HGET', row, 'attempts'), 0)
      if attempts and attempts >= max_attempts then
        move.spent = attempts
        move.ended = base .. 'ended:' .. id
        local err = check_ended(move.ended)
        if err then return nil, err end
      elseif lane then
        local lane_key = base .. 'lane:' .. lane
        if not may_access(lane_key) then return nil, redis.error_reply(E_PERM) end
        local t = derived_type(lane_key)
        if t == nil then return nil, redis.error_reply(E_MOVING) end
        if t ~= 'none' and t ~= 'list' then return nil, redis.error_reply(E_TYPE) end
        move.lane, move.lane_key = lane, lane_key
      elseif fallback_score ~= nil then
        move.score = dec(int_field(redis.call('HGET', row, 'enqueued_at'), fallback_score))
      end
      moves[#moves + 1] = move
    else
      ghosts[#ghosts + 1] = id
    end
  end
  return moves, ghosts
end

-- Put a job back into its lane (at the head or the tail), the group joining the ring if the lane
-- was empty and the group is not parked.
local function push_lane(ring, move, command)
  if redis.call('LLEN', move.lane_key) == 0 then
    local base = string.sub(ring, 1, -5)
    if redis.call('HGET', base .. 'parked', move.lane) == false then
      redis.call('RPUSH', ring, move.lane)
    end
  end
  redis.call(command, move.lane_key, move.id)
end

-- recover and promote, once their call is checked: the entries of KEYS[1] due by now (at most
-- limit) go back to run; ghosts are dropped from KEYS[1]. recover (max_attempts given) returns flat
-- jobs to pending at their enqueued_at and lane jobs to their lane's head, latest deadline first so
-- the lane keeps their order, and sends a job whose attempts are used up to dead (KEYS[5]);
-- promote returns flat jobs with their due time as score and lane jobs to their lane's tail, in
-- due order. Replies the jobs taken (back to run or dead); wake tokens only for those back to run.
local function move_due(base, now, limit, max_attempts, check)
  local recover = max_attempts ~= nil
  local from, pending, ring, wake_key, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', dec(now), 'WITHSCORES', 'LIMIT', '0',
    dec(limit))
  local moves, ghosts = plan_moves(base, due, recover and now or nil, max_attempts)
  if moves == nil then return ghosts end
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
    redis.call('ZREM', from, move.id)
    if recover then release_lane_slot(base, move.row) end
    if move.spent then
      redis.call('HSET', move.row, 'error',
        'lease expired during attempt ' .. dec(move.spent) .. ': the worker was lost')
      redis.call('ZADD', dead, dec(now), move.id)
      mark_ended(move.ended, nil)
    elseif move.lane then
      push_lane(ring, move, push)
      back = back + 1
    else
      redis.call('ZADD', pending, move.score, move.id)
      back = back + 1
    end
  end
  wake(wake_key, back)
  return #moves
end
