--[[
  settle: a consumer's round in one call. Settle many leases (ack, retry or release each), then
  lease up to count pending jobs, atomically.
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>delayed    jobs waiting to run again (zset)
    KEYS[3] <base>dead       jobs that used up their attempts (zset)
    KEYS[4] <base>pending    flat jobs ready to run (zset)
    KEYS[5] <base>fence      the queue's fence counter (string)
    KEYS[6] <base>ring       groups with waiting lane jobs (list)
    KEYS[7] <base>wake       wake tokens (list)
    KEYS[8] <base>claim:<claim_id>  optional: the call's claim record (string, include/records.lua)
    KEYS[9] <base>events            optional: the queue's events (stream), the last key
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] retention_ms     integer >= 0, an acked row's tombstone time (0: deleted)
    ARGV[3] lease_ms         integer >= 1, the lease of each job claimed
    ARGV[4] count            integer >= 0, how many jobs to claim at most
    ARGV[5..] items          each `ack <id> <fence>`, `done <id> <fence> <result>`,
                             `release <id> <fence>` or
                             `retry <id> <fence> <delay_ms> <max_attempts> <error>`
  Derived: <base>job:<id> of every item's id and of each pending id walked; <base>lane:<lane> of
  a release item's row that has a lane; <base>ended:<id> of a done or retry item.
  Items are applied in order with ack's, ack_result's (done) and retry's semantics (an id settled twice: the second is
  the first's replay, STALE for a release); release hands a lease back unrun: the job goes where recover would put it (a flat job to
  pending at its enqueued_at in its priority's band, a lane job to its lane's head), its attempt is uncounted (never below
  0; the fence counter is not rewound) and a wake token is left. Then jobs are leased as claim
  leases them, ghosts on the way dropped, jobs whose deadline now meets ended dead (as claim ends them,
  a wake token when the walk stops at its bound). The claim walk is planned before anything is written, so
  a job released by this call is not claimed by it. While the queue is paused (<base>paused
  present) no job is leased; the queue's limits (<base>queueconf, read after paused when count > 0)
  cut the jobs leased to what fits after the items. A lease of a lane job that leaves active gives its group's slot back.
  With a record and count > 0: a record found answers its leases still held as the jobs, and no
  job is leased; else the leases made are recorded for lease_ms.
  Replies: a pair: the verdicts (+ACKED, +RETRYING, +DEAD, +RELEASED or +STALE per item, in order)
  and the jobs leased (each id, payload, attempt, fence) | EMQARITY, EMQKEYS, EMQNUM, EMQITEM,
  EMQKIND, EMQSIZE, WRONGTYPE, EMQFENCE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "dependents"
--- @include "claims"
--- @include "derived"
--- @include "ended"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "lane_slots"
--- @include "lanes"
--- @include "leases"
--- @include "numbers"
--- @include "priority"
--- @include "queue_limits"
--- @include "records"
--- @include "rows"
--- @include "settlements"
--- @include "wake"
-- The shape an item must have (EMQITEM), as the protocol table's settle row states it.
local SETTLE_ITEM =
  'ack <id> <fence>, done <id> <fence> <result>, release <id> <fence> or retry <id> <fence> <delay_ms> <max_attempts> <error>'

if #KEYS < 7 or #KEYS > 9 or #ARGV < 4 then return variadic_arity_error('SETTLE', 7, 4) end
local base = keys_base({ 'active', 'delayed', 'dead', 'pending', 'fence', 'ring', 'wake' })
local record_key, events_key = optional_keys(base, 7, true)
if record_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[1])
if now == nil then return redis.error_reply(E_NOW) end
local retention_ms = int_arg(ARGV[2], 0)
if retention_ms == nil then return number_error('retention_ms', 0) end
local lease_ms = int_arg(ARGV[3], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local count = int_arg(ARGV[4], 0)
if count == nil then return number_error('count', 0) end

-- Every item parsed before anything is read: { op, id, fence[, delay_ms, max_attempts, error] }.
local items = {}
local i = 5
while i <= #ARGV do
  local n = #items + 1
  local op = ARGV[i]
  local width = ((op == 'ack' or op == 'release') and 3) or (op == 'done' and 4)
    or (op == 'retry' and 6) or nil
  if width == nil or i + width - 1 > #ARGV then return item_error(n, SETTLE_ITEM) end
  local id = ARGV[i + 1]
  if not id_ok(id) then return redis.error_reply(E_KIND) end
  local item = { op = op, id = id, fence = int_arg(ARGV[i + 2], 1) }
  if item.fence == nil then return number_error('fence', 1) end
  if op == 'done' then
    item.result = ARGV[i + 3]
    if not result_ok(item.result) then return redis.error_reply(E_RESULT) end
  elseif op == 'retry' then
    item.delay_ms = int_arg(ARGV[i + 3], 0)
    if item.delay_ms == nil then return number_error('delay_ms', 0) end
    item.max_attempts = int_arg(ARGV[i + 4], 1)
    if item.max_attempts == nil then return number_error('max_attempts', 1) end
    item.error = ARGV[i + 5]
  end
  items[n] = item
  i = i + width
end
if not types_ok({ 'zset', 'zset', 'zset', 'zset', 'string', 'list', 'list' }) then
  return redis.error_reply(E_TYPE)
end
if record_key and not record_type_ok(record_key) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local active, delayed, dead, pending, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ring, wake_key = KEYS[6], KEYS[7]

-- A release item's lane, when its row has one: the lane keys checked as recover checks them.
-- Nil, or the error reply.
local function plan_release_lane(item)
  local lane = item.r.lane
  if not lane then return nil end
  local failure = check_lane_keys(base, lane)
  if failure then return failure end
  item.lane, item.lane_key = lane, base .. 'lane:' .. lane
  item.priority = row_priority(item.row)
  item.at = int_field(row_field(item.row, 't'), now)
  return nil
end

-- release's effect on a current lease: leave active, uncount the attempt, go back where recover
-- puts an expired lease, leave a wake token. Returns the verdict.
local function finish_release(item)
  redis.call('ZREM', active, item.id)
  release_lane_slot(base, item.row)
  local attempts = int_field(row_field(item.row, 'a'), 0)
  redis.call('HSET', item.row, 'a', dec(math.max(attempts - 1, 0)))
  if item.lane then
    push_lane(ring, item, 'LPUSH')
  else
    local at = int_field(row_field(item.row, 't'), now)
    redis.call('ZADD', pending, dec(pending_score(row_priority(item.row), at)), item.id)
  end
  wake(wake_key, 1)
  emit(events_key, 'released', item.id, math.max(attempts - 1, 0), now, 'fence', dec(item.fence),
    with_lane(item.lane))
  return 'RELEASED'
end
-- An item that ends its job (a current lease, not settled earlier in the call) plans its end
-- hook (include/dependents.lua): done for ack and done, dead for a retry using up its attempts,
-- cancelled for a flagged lease; release ends nothing.
local join, current = new_join(base, now, events_key), {}
local function plan_item_hook(item)
  if current[item.id] or not is_lease_read(active, item.id, item.fence, item.r) then
    return nil
  end
  current[item.id] = true
  local outcome, detail, failure
  if item.r.cancel then
    outcome, detail = 'cancelled', mark_of(item.row)
  elseif item.op == 'ack' or item.op == 'done' then
    outcome = 'done'
  elseif item.op == 'retry' and int_field(item.r.attempts, 0) >= item.max_attempts then
    outcome, detail = 'dead', item.error
  end
  if outcome then
    item.from, item.to, failure = plan_hook(join, item.id, item.row, outcome, detail, item.r)
  end
  return failure
end

local recorded
if count > 0 then
  local record_failure
  recorded, record_failure = read_record(base, record_key)
  if record_failure then return record_failure end
  if recorded then count = 0 end
end
if count > 0 then
  local paused, failure = queue_paused(base)
  if paused == nil then return failure end
  if paused then count = 0 end
end
local limits
if count > 0 then
  local limits_failure
  limits, limits_failure = queue_limits(base, now)
  if limits == nil then return limits_failure end
end
local last_fence = 0
if count > 0 then
  last_fence = fence_counter(fence_key)
  if last_fence == nil then return redis.error_reply(E_FENCE) end
end
for n = 1, #items do
  local item = items[n]
  item.row = base .. 'job:' .. item.id
  local err = check_row(item.row)
  if err == nil then
    item.r = read_lease(item.row)
    known_lane(item.row, item.r.lane)
  end
  if err == nil and item.op == 'release' then err = plan_release_lane(item) end
  if err == nil and (item.op == 'done' or item.op == 'retry' or item.r.cancel) then
    item.ended = base .. 'ended:' .. item.id
    err = check_ended(item.ended)
  end
  if err == nil then err = check_lane_bookkeeping(base, item.row) end
  if err == nil then err = plan_item_hook(item) end
  if err then return err end
end
local claims, ghosts, expired, err = plan_claims(base, pending, count, now)
if claims == nil then return err end
local expired_from = #join.steps + 1
for n = 1, #expired do
  local failure = plan_expire(join, expired[n].id, expired[n].row)
  if failure then return failure end
end
local expired_to = #join.steps
-- Each lease takes the next fence: a batch the counter cannot number to its end is refused.
if last_fence + #claims > FENCE_MAX + 1 then return redis.error_reply(E_FENCE) end

local verdicts = {}
for n = 1, #items do
  local item = items[n]
  local verdict
  local state = row_fields(item.row, 'f', 'cancel')
  if state[1] == false or int_field(state[1], 0) ~= item.fence
    or redis.call('ZSCORE', active, item.id) == false then
    if item.op ~= 'release' then
      verdict = replayed(item.row, item.fence, item.error, dead, item.id)
    else
      verdict = cancelled_at(item.row, item.fence) and 'CANCELLED' or 'STALE'
    end
  elseif state[2] then
    verdict = finish_cancelled(active, item.row, item.id, item.ended, events_key, item.fence, now)
  elseif item.op == 'ack' or item.op == 'done' then
    verdict = finish_ack(active, item.row, item.id, retention_ms, item.result, item.ended,
      events_key, item.fence, now)
  elseif item.op == 'release' then
    verdict = finish_release(item)
  else
    verdict = finish_retry(active, delayed, dead, item.row, item.id, item.error, item.delay_ms,
      item.max_attempts, now, item.ended, events_key, item.fence)
  end
  if item.from then apply_steps(join, item.from, item.to) end
  verdicts[n] = redis.status_reply(verdict)
end

if recorded then return { verdicts, held_leases(active, recorded) } end
for n = 1, #ghosts do redis.call('ZREM', pending, ghosts[n]) end
apply_steps(join, expired_from, expired_to)
if #expired >= EXPIRED_MAX then wake(wake_key, 1) end -- the walk stopped at its bound
local jobs, leases = {}, {}
local take = limits and limited_take(limits, active, #claims) or 0
for n = 1, take do
  local id, row = claims[n].id, claims[n].row
  redis.call('ZREM', pending, id)
  local attempt, fence, payload = lease(row, id, active, fence_key, last_fence, now + lease_ms)
  last_fence = fence
  emit(events_key, 'claimed', id, attempt, now, 'fence', dec(fence))
  jobs[n] = { id, payload, attempt, fence }
  leases[n] = { id, fence }
end
write_record(record_key, leases, lease_ms)
if limits then note_queue_limits(base, limits, active, pending, take) end
return { verdicts, jobs }
