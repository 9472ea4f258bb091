--[[
  lane_claim: serve the lanes in turn, within their limits. Groups whose
  rate window has opened come back to the ring's tail first. The ring's head group has its lane's
  head job leased; it stays at the head until served weight times in its turn, then rotates to
  the tail. A group leaves the ring (parked) when its lane empties, when it reaches its
  concurrency limit or its rate: it comes back when a lease of it leaves active, or its window
  opens. Ghosts are skipped and dropped; a ring entry a group left behind (<base>ringleft) or
  whose lane holds nothing live is dropped, and one over a limit lowered since it joined is
  parked, without serving it; at most 100 entries are walked a call (null when none of them is
  served, the ring then still holding entries). A paused queue
  leases nothing. Everything is checked before anything is written. Scripts only: no native twin.
    KEYS[1] <base>ring       groups whose lanes are non-empty and not parked (list)
    KEYS[2] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[3] <base>fence      the queue's fence counter, one up per lease (string)
    KEYS[4] <base>laneconf   knobs: <knob> the queue's default, <knob>:<group> a group's (hash)
    KEYS[5] <base>leased     leases held per group (hash)
    KEYS[6] <base>parked     why a group is out of the ring, bits 1 limit 2 rate 4 paused (hash)
    KEYS[7] <base>throttled  groups over their rate, score = when their window opens (zset)
    KEYS[8] <base>windows    each rate-limited group's window: '<start> <claims>' (hash)
    KEYS[9] <base>turn       '<served> <group>': the ring head's claims in its turn (string)
    KEYS[10] <base>paused    present while the whole queue is paused (string)
    KEYS[11] <base>claim:<claim_id>  optional: the call's claim record (string, include/records.lua)
    KEYS[12] <base>events            optional: the queue's events (stream), the last key
    ARGV[1] lease_ms         integer >= 1
    ARGV[2] now              ms, or * for the server clock
  Derived: <base>ringleft (hash), <base>lane:<group> and <base>prio:<group> of the groups
  walked, <base>job:<id> of the ids walked. A group serves its jobs by priority (include/lane_heads.lua), FIFO within one.
  The job is leased as by claim. With a record: a record found answers its first lease of a lane
  job still held (with its group), or null, writing nothing; else the lease made is recorded.
  Replies: [id, payload, attempt, fence, group] | null | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE,
  EMQFENCE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "claims"
--- @include "errors"
--- @include "events"
--- @include "keys"
--- @include "lane_heads"
--- @include "lane_limits"
--- @include "lanes"
--- @include "numbers"
--- @include "records"
--- @include "reopen"
if #KEYS < 10 or #KEYS > 12 or #ARGV ~= 2 then return arity_error('LANE_CLAIM', 10, 2) end
local base = keys_base({ 'ring', 'active', 'fence', 'laneconf', 'leased', 'parked', 'throttled', 'windows', 'turn', 'paused' })
local record_key, events_key = optional_keys(base, 10, true)
if record_key == false then return redis.error_reply(E_KEYS) end
local lease_ms = int_arg(ARGV[1], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'list', 'zset', 'string', 'hash', 'hash', 'hash', 'zset', 'hash', 'string', 'string' }) then
  return redis.error_reply(E_TYPE)
end
if record_key and not record_type_ok(record_key) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local ring, active, fence_key = KEYS[1], KEYS[2], KEYS[3]
local recorded, record_failure = read_record(base, record_key)
if record_failure then return record_failure end
if recorded then
  for _, job in ipairs(held_leases(active, recorded)) do
    local group = redis.call('HGET', base .. 'job:' .. job[1], 'lane')
    if group then return { job[1], job[2], job[3], job[4], group } end
  end
  return false
end
local last_fence = fence_counter(fence_key)
if last_fence == nil then return redis.error_reply(E_FENCE) end
if redis.call('EXISTS', KEYS[10]) == 1 then return false end
local left_failure = check_ring_left(base)
if left_failure then return left_failure end
local due, failure = due_lanes(base, now, 1000)
if due == nil then return failure end
reopen_lanes(base, due)

-- First pass: find the first group (from the ring's head) whose lane holds a live job and that
-- is within its limits; the entries before it are dropped (left behind: include/lanes.lua
-- left_entries; stale) or parked (over a limit). At most RING_WALK entries are looked at, so that
-- a call stays short however many entries groups left at the head (many lanes paused): one
-- that finds no group in them drops or parks them and replies null, the ring not yet empty.
local RING_WALK = 100
local passed, found, popped, left, left_order = {}, nil, 0, {}, {}
for position = 0, math.min(redis.call('LLEN', ring), RING_WALK) - 1 do
  local group = redis.call('LINDEX', ring, position)
  local counted = left[group]
  if counted == nil then
    counted = { count = left_entries(base, group), met = 0 }
    left[group] = counted
    left_order[#left_order + 1] = group
  end
  if counted.met < counted.count then
    counted.met = counted.met + 1
    popped = popped + 1
  else
    local live, head_failure = lane_head(base, group)
    if head_failure then return head_failure end
    local bits, opens = 0, nil
    if live then
      live.knobs = lane_knobs(base, group)
      bits, opens = lane_over(base, group, now, live.knobs)
    end
    if live and bits == 0 then
      found = live
      break
    end
    passed[#passed + 1] = { group = group, bits = bits, opens = opens, stale = live == nil }
    popped = popped + 1
  end
end

-- Second pass: the entries walked past leave the ring's head (one LPOP); the left ones are
-- counted off, the stale groups' ghost-only lanes deleted, the groups over a limit parked.
if popped > 0 then
  redis.call('LPOP', ring, popped)
  redis.call('DEL', KEYS[9])
end
for _, g in ipairs(left_order) do
  local counted = left[g]
  if counted.met > 0 then set_left_entries(base, g, counted.count - counted.met) end
end
for _, entry in ipairs(passed) do
  if entry.stale then
    redis.call('DEL', base .. 'lane:' .. entry.group, base .. 'prio:' .. entry.group)
  else
    set_parked(base, entry.group, bit.bor(parked_mask(base, entry.group), entry.bits),
      entry.opens, 'popped')
  end
end
if found == nil then return false end

local group = found.group
take_head(found)
redis.call('HINCRBY', KEYS[5], group, 1)
local knobs = found.knobs
if knobs.rate then
  local start, count = lane_window(base, group, now, knobs.window_ms)
  redis.call('HSET', KEYS[8], group, dec(start) .. ' ' .. dec(count + 1))
end
local bits, opens = lane_over(base, group, now, knobs)
local turn = redis.call('GET', KEYS[9])
local served = 1
if turn then
  local n, head = string.match(turn, '^(%d+) (.*)$')
  if head == group then served = tonumber(n) + 1 end
end
if bits ~= 0 or lane_empty(base, group) then
  ring_drop_head(base)
  if bits ~= 0 then
    set_parked(base, group, bit.bor(parked_mask(base, group), bits), opens, 'popped')
  end
elseif served >= knobs.weight then
  redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
  redis.call('DEL', KEYS[9])
else
  redis.call('SET', KEYS[9], dec(served) .. ' ' .. group)
end
local attempt, fence, payload = lease(found.row, found.id, active, fence_key, last_fence,
  now + lease_ms)
emit(events_key, 'claimed', found.id, attempt, now, 'fence', dec(fence), 'lane', group)
write_record(record_key, { { found.id, fence } }, lease_ms)
return { found.id, payload, attempt, fence, group }
