-- A group's next job to serve (lane_claim), in the order of its priorities: the members of its
-- prio zset scored below 0 (priority above 0), lowest first; then its list from the head
-- (priority 0); then the zset's other members (priority below 0). FIFO holds within a priority.
-- Ghosts (ids whose row is gone) before it are noted, to be dropped.
--- @include "derived"
--- @include "errors"
--- @include "lanes"

-- Whether a job id's row is a hash; nil and the error reply when the row cannot be touched.
local function row_live(base, id)
  local row = base .. 'job:' .. id
  if not may_access(row) then return nil, redis.error_reply(E_PERM) end
  local t = derived_type(row)
  if t == nil then return nil, redis.error_reply(E_MOVING) end
  return t == 'hash'
end

-- The prio zset walked from rank on, up to its first member scored 0 or more when below_zero:
-- the first live id (or nil) and the rank reached; ghosts walked are appended to head.prio_ghosts.
local function walk_prio(base, head, rank, below_zero)
  while true do
    local entry = redis.call('ZRANGE', head.prio_key, rank, rank, 'WITHSCORES')
    if #entry == 0 or (below_zero and tonumber(entry[2]) >= 0) then return nil, rank end
    local live, failure = row_live(base, entry[1])
    if failure then return nil, rank, failure end
    if live then return entry[1], rank end
    head.prio_ghosts[#head.prio_ghosts + 1] = entry[1]
    rank = rank + 1
  end
end

-- The group's next live job, its two keys checked first: a table (group, lane_key, prio_key, id,
-- row, in_prio, list_ghosts: how many ghosts head its list, prio_ghosts), or nil when the group
-- holds only ghosts; nil and the error reply when a key cannot be touched.
local function lane_head(base, group)
  local failure = check_lane_keys(base, group)
  if failure then return nil, failure end
  local head = { group = group, lane_key = base .. 'lane:' .. group, prio_key = base .. 'prio:' .. group,
    list_ghosts = 0, prio_ghosts = {} }
  local id, rank
  id, rank, failure = walk_prio(base, head, 0, true)
  if failure then return nil, failure end
  if id then
    head.in_prio = true
  else
    for depth = 0, redis.call('LLEN', head.lane_key) - 1 do
      local member = redis.call('LINDEX', head.lane_key, depth)
      local live
      live, failure = row_live(base, member)
      if failure then return nil, failure end
      if live then
        id = member
        break
      end
      head.list_ghosts = depth + 1
    end
  end
  if id == nil then
    id, rank, failure = walk_prio(base, head, rank, false)
    if failure then return nil, failure end
    head.in_prio = id ~= nil
  end
  if id == nil then return nil end
  head.id, head.row = id, base .. 'job:' .. id
  return head
end

-- The claimed head leaves its group's keys, with the ghosts before it.
local function take_head(head)
  for i = 1, #head.prio_ghosts do redis.call('ZREM', head.prio_key, head.prio_ghosts[i]) end
  for _ = 1, head.list_ghosts do redis.call('LPOP', head.lane_key) end
  if head.in_prio then
    redis.call('ZREM', head.prio_key, head.id)
  else
    redis.call('LPOP', head.lane_key)
  end
end
