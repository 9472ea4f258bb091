-- Wake tokens: what a parked consumer blocks on.
local WAKE_CAP = 64

-- Leave up to n wake tokens, never more than WAKE_CAP in the list.
local function wake(key, n)
  local room = WAKE_CAP - redis.call('LLEN', key)
  if n > room then n = room end
  for _ = 1, n do redis.call('RPUSH', key, '1') end
end
