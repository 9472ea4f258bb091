-- The gates of a call's arguments: job ids, lane names, now.
--- @include "numbers"

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

local function now_arg(s)
  if s == '*' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return int_arg(s, 0)
end
