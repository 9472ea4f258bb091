-- A group's limits at now: its concurrency, its rate window.
--- @include "lanes"
--- @include "numbers"

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

-- Recompute a group's limit bits (its pause bit kept) from its knobs and state at now.
local function lane_refresh(base, group, now)
  local paused = bit.band(parked_mask(base, group), PARKED_PAUSED)
  local bits, opens = lane_over(base, group, now)
  set_parked(base, group, paused + bits, opens, 'operator')
end
