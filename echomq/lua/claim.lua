--[[
  claim: lease the oldest pending job, dropping ghosts on the way.
    KEYS[1] <base>pending    flat jobs ready to run (zset)
    KEYS[2] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[3] <base>fence      the queue's fence counter, one up per lease (string)
    KEYS[4] <base>claim:<claim_id>  optional: the call's claim record (string, include/records.lua)
    KEYS[5] <base>events            optional: the queue's events (stream), the last key
    ARGV[1] lease_ms         integer >= 1
    ARGV[2] now              ms, or * for the server clock
  Derived: <base>job:<id> of each id walked; for each job whose deadline now meets (its row's
  expires_at, at most 100 a call), <base>dead, <base>ended:<id>, <base>counts and the keys of
  its end hook (include/dependents.lua): it goes dead with the error 'expired' instead of being
  leased, and the walk goes on to the next job; a walk that stops at that bound leaves one
  wake token in <base>wake (derived, checked after them), so a consumer claims again at once.
  The lease is (id, fence): the counter's next value, also written to the row's fence field.
  While the queue is paused (<base>paused present, see lane_pause) nothing is leased: null.
  The queue's limits (<base>queueconf, derived, after paused; include/queue_limits.lua): at its
  concurrency or over its rate nothing is leased: null.
  With a record: a record found answers its first lease still held (or null), writing nothing;
  else the lease made is recorded for lease_ms.
  Replies: [id, payload, attempt, fence] | null | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, EMQFENCE,
  NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "claims"
--- @include "dependents"
--- @include "derived"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "numbers"
--- @include "queue_limits"
--- @include "records"
--- @include "wake"
if #KEYS < 3 or #KEYS > 5 or #ARGV ~= 2 then return arity_error('CLAIM', 3, 2) end
local base = keys_base({ 'pending', 'active', 'fence' })
local record_key, events_key = optional_keys(base, 3, true)
if record_key == false then return redis.error_reply(E_KEYS) end
local lease_ms = int_arg(ARGV[1], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'zset', 'zset', 'string' }) then return redis.error_reply(E_TYPE) end
if record_key and not record_type_ok(record_key) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local pending, active, fence_key = KEYS[1], KEYS[2], KEYS[3]
local recorded, record_failure = read_record(base, record_key)
if record_failure then return record_failure end
if recorded then return held_leases(active, recorded)[1] or false end
local last_fence = fence_counter(fence_key)
if last_fence == nil then return redis.error_reply(E_FENCE) end
local paused, failure = queue_paused(base)
if paused == nil then return failure end
if paused then return false end
local limits, limits_failure = queue_limits(base, now)
if limits == nil then return limits_failure end
local claims, ghosts, expired, err = plan_claims(base, pending, 1, now)
if claims == nil then return err end
local join = new_join(base, now, events_key)
for i = 1, #expired do
  local failure = plan_expire(join, expired[i].id, expired[i].row)
  if failure then return failure end
end
local wake_key = #expired >= EXPIRED_MAX and base .. 'wake' or nil
if wake_key then
  local failure = check_derived(wake_key, 'list')
  if failure then return failure end
end
for i = 1, #ghosts do redis.call('ZREM', pending, ghosts[i]) end
apply_steps(join)
if wake_key then wake(wake_key, 1) end
if #claims == 0 or limited_take(limits, active, 1) == 0 then
  note_queue_limits(base, limits, active, pending, 0)
  return false
end

local id, row = claims[1].id, claims[1].row
redis.call('ZREM', pending, id)
local attempt, fence, payload = lease(row, id, active, fence_key, last_fence, now + lease_ms)
emit(events_key, 'claimed', id, attempt, now, 'fence', dec(fence))
write_record(record_key, { { id, fence } }, lease_ms)
note_queue_limits(base, limits, active, pending, 1)
return { id, payload, attempt, fence }
