-- A new job's row, written once by the enqueue scripts.
--- @include "numbers"

-- One HSET: p (the payload), t now (the enqueue time; no a: absent counts as no attempt until the
-- first claim), a lane job's lane (group, when given), then
-- priority, written only when it is not 0 (a row without it is priority 0, so a job at 0 has the
-- fields it always had), then the field/value pairs of extra (enqueue_unique's dedupe fields).
local function new_row(row, payload, now, priority, group, extra)
  local fields = { 'p', payload, 't', dec(now) }
  if group then
    fields[#fields + 1], fields[#fields + 2] = 'lane', group
  end
  if priority ~= 0 then
    fields[#fields + 1], fields[#fields + 2] = 'priority', dec(priority)
  end
  for _, v in ipairs(extra or {}) do fields[#fields + 1] = v end
  redis.call('HSET', row, unpack(fields))
end

-- The extra fields of a job admitted with a deadline (expires_at above 0): its row's expires_at,
-- which a claim meeting it reads (include/claims.lua); none without one.
local function expiry_fields(expires_at)
  if expires_at == 0 then return nil end
  return { 'expires_at', dec(expires_at) }
end
