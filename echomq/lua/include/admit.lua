-- A new job's row, written once by the enqueue scripts.
--- @include "numbers"

-- One HSET: payload, attempts 0, enqueued_at now, then priority, written only when it is not 0
-- (a row without it is priority 0, so a job at 0 has the fields it always had).
local function new_row(row, payload, now, priority)
  if priority == 0 then
    redis.call('HSET', row, 'payload', payload, 'attempts', '0', 'enqueued_at', dec(now))
  else
    redis.call('HSET', row, 'payload', payload, 'attempts', '0', 'enqueued_at', dec(now),
      'priority', dec(priority))
  end
end
