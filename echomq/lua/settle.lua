--[[
  settle: a consumer's round in one call. Settle many leases (ack or retry each), then lease up to
  count pending jobs, atomically.
    KEYS[1] <base>active     leased jobs (zset)
    KEYS[2] <base>delayed    jobs waiting to run again (zset)
    KEYS[3] <base>dead       jobs that used up their attempts (zset)
    KEYS[4] <base>pending    flat jobs ready to run (zset)
    KEYS[5] <base>fence      the queue's fence counter (string)
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] retention_ms     integer >= 0, an acked row's tombstone time (0: deleted)
    ARGV[3] lease_ms         integer >= 1, the lease of each job claimed
    ARGV[4] count            integer >= 0, how many jobs to claim at most
    ARGV[5..] items          each `ack <id> <fence>` or
                             `retry <id> <fence> <delay_ms> <max_attempts> <error>`
  Derived: <base>job:<id> of every item's id and of each pending id walked.
  Items are applied in order with ack's and retry's semantics (an id settled twice: the second is
  STALE); then jobs are leased as claim leases them, ghosts on the way dropped. The claim walk is
  planned before anything is written.
  Replies: a pair: the verdicts (+ACKED, +RETRYING, +DEAD or +STALE per item, in order) and the
  jobs leased (each id, payload, attempt, fence) | EMQARITY, EMQKEYS, EMQNUM, EMQITEM, EMQKIND,
  WRONGTYPE, EMQFENCE, NOPERM, TRYAGAIN errors.
]]
if #KEYS ~= 5 or #ARGV < 4 then return variadic_arity_error('SETTLE', 5, 4) end
local base = keys_base({ 'active', 'delayed', 'dead', 'pending', 'fence' })
if base == nil then return redis.error_reply(E_KEYS) end
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
  local width = (op == 'ack' and 3) or (op == 'retry' and 6) or nil
  if width == nil or i + width - 1 > #ARGV then return item_error(n, SETTLE_ITEM) end
  local id = ARGV[i + 1]
  if not id_ok(id) then return redis.error_reply(E_KIND) end
  local item = { op = op, id = id, fence = int_arg(ARGV[i + 2], 1) }
  if item.fence == nil then return number_error('fence', 1) end
  if op == 'retry' then
    item.delay_ms = int_arg(ARGV[i + 3], 0)
    if item.delay_ms == nil then return number_error('delay_ms', 0) end
    item.max_attempts = int_arg(ARGV[i + 4], 1)
    if item.max_attempts == nil then return number_error('max_attempts', 1) end
    item.error = ARGV[i + 5]
  end
  items[n] = item
  i = i + width
end
if not types_ok({ 'zset', 'zset', 'zset', 'zset', 'string' }) then
  return redis.error_reply(E_TYPE)
end

local active, delayed, dead, pending, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local last_fence = 0
if count > 0 then
  last_fence = fence_counter(fence_key)
  if last_fence == nil then return redis.error_reply(E_FENCE) end
end
for n = 1, #items do
  items[n].row = base .. 'job:' .. items[n].id
  local err = check_row(items[n].row)
  if err then return err end
end
local claims, ghosts, err = plan_claims(base, pending, count)
if claims == nil then return err end
-- Each lease takes the next fence: a batch the counter cannot number to its end is refused.
if last_fence + #claims > FENCE_MAX + 1 then return redis.error_reply(E_FENCE) end

local verdicts = {}
for n = 1, #items do
  local item = items[n]
  local verdict
  if not is_current_lease(active, item.row, item.id, item.fence) then
    verdict = 'STALE'
  elseif item.op == 'ack' then
    verdict = finish_ack(active, item.row, item.id, retention_ms)
  else
    verdict = finish_retry(active, delayed, dead, item.row, item.id, item.error, item.delay_ms,
      item.max_attempts, now)
  end
  verdicts[n] = redis.status_reply(verdict)
end

for n = 1, #ghosts do redis.call('ZREM', pending, ghosts[n]) end
local jobs = {}
for n = 1, #claims do
  local id, row = claims[n].id, claims[n].row
  redis.call('ZREM', pending, id)
  local attempt, fence = lease(row, id, active, fence_key, last_fence, now + lease_ms)
  last_fence = fence
  jobs[n] = { id, redis.call('HGET', row, 'payload') or '', attempt, fence }
end
return { verdicts, jobs }
