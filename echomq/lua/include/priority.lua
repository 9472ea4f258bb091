-- A job's priority and its pending score (echomq/engine/transitions.py: PRIORITY_BAND, TIME_CAP).
local PRIORITY_BAND = 35184372088832
local TIME_CAP = PRIORITY_BAND - 1

-- A priority argument: an optional '-', then 1..3 ASCII digits, from -100 to 100; nil otherwise.
local function priority_arg(s)
  if string.find(s, '^%-?[0-9][0-9]?[0-9]?$') == nil then return nil end
  local v = tonumber(s)
  if v < -100 or v > 100 then return nil end
  if v == 0 then return 0 end
  return v
end

-- The optional priority argument at ARGV[n]: 0 when the call leaves it off, nil when bad.
local function optional_priority(n)
  if #ARGV < n then return 0 end
  return priority_arg(ARGV[n])
end

-- The priority of the job whose row is the key row: its priority field read as the argument is;
-- absent or bad counts as 0.
local function row_priority(row)
  local v = redis.call('HGET', row, 'priority')
  if v == false then return 0 end
  return priority_arg(v) or 0
end

-- The pending score of a job of priority p at time t: higher priorities sort first, FIFO within
-- one; times past TIME_CAP are clamped inside the band.
local function pending_score(p, t)
  return math.min(t, TIME_CAP) - p * PRIORITY_BAND
end
