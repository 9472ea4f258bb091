--[[
  lane_claim (the seed's @gclaim2): serve the lanes in turn. The ring's head group is rotated to
  the tail (LMOVE ring ring LEFT RIGHT) and its lane's head job is leased; a lane that empties
  leaves the ring. Ghosts are skipped and dropped; a ring entry whose lane holds nothing live is
  dropped too. Everything is checked before anything is written. Scripts only: no native twin.
    KEYS[1] <base>ring       groups whose lanes are non-empty (list)
    KEYS[2] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[3] <base>fence      the queue's fence counter, one up per lease (string)
    ARGV[1] lease_ms         integer >= 1
    ARGV[2] now              ms, or * for the server clock
  Derived: <base>lane:<group> of the groups walked, <base>job:<id> of the ids walked.
  The job is leased as by claim.
  Replies: [id, payload, attempt, fence, group] | null | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE,
  EMQFENCE, NOPERM, TRYAGAIN errors.
]]
if #KEYS ~= 3 or #ARGV ~= 2 then return arity_error('LANE_CLAIM', 3, 2) end
local base = keys_base({ 'ring', 'active', 'fence' })
if base == nil then return redis.error_reply(E_KEYS) end
local lease_ms = int_arg(ARGV[1], 1)
if lease_ms == nil then return number_error('lease_ms', 1) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
if not types_ok({ 'list', 'zset', 'string' }) then return redis.error_reply(E_TYPE) end

local ring, active, fence_key = KEYS[1], KEYS[2], KEYS[3]
local last_fence = fence_counter(fence_key)
if last_fence == nil then return redis.error_reply(E_FENCE) end

-- First pass: find the first group (from the ring's head) whose lane holds a live job.
local stale, found = 0, nil
for position = 0, redis.call('LLEN', ring) - 1 do
  local group = redis.call('LINDEX', ring, position)
  local lane_key = base .. 'lane:' .. group
  if not may_access(lane_key) then return redis.error_reply(E_PERM) end
  local t = derived_type(lane_key)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'list' then return redis.error_reply(E_TYPE) end
  for depth = 0, redis.call('LLEN', lane_key) - 1 do
    local id = redis.call('LINDEX', lane_key, depth)
    local row = base .. 'job:' .. id
    if not may_access(row) then return redis.error_reply(E_PERM) end
    local row_type = derived_type(row)
    if row_type == nil then return redis.error_reply(E_MOVING) end
    if row_type == 'hash' then
      found = { group = group, lane_key = lane_key, ghosts = depth, id = id, row = row }
      break
    end
  end
  if found then break end
  stale = stale + 1
end

-- Second pass: drop the stale groups (all at the ring's head) and their ghost-only lanes.
for _ = 1, stale do
  redis.call('DEL', base .. 'lane:' .. redis.call('LPOP', ring))
end
if found == nil then return false end

redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
for _ = 1, found.ghosts do redis.call('LPOP', found.lane_key) end
redis.call('LPOP', found.lane_key)
if redis.call('LLEN', found.lane_key) == 0 then redis.call('RPOP', ring) end
local attempt, fence = lease(found.row, found.id, active, fence_key, last_fence, now + lease_ms)
return { found.id, redis.call('HGET', found.row, 'payload') or '', attempt, fence, found.group }
