-- A cancelled job: the cancel mark on its row, and the tombstone it ends as.
--- @include "ended"
--- @include "numbers"
--- @include "rows"

-- The cancel mark: cancel <retention_ms> (the retention its tombstone gets) and cancelled <now>
-- (when it was asked). On a leased job's row it is the flag its lease's holder is told of.
local function mark_cancel(row, retention_ms, now)
  redis.call('HSET', row, 'cancel', dec(retention_ms), 'cancelled', dec(now))
end

-- How many entries the cancel notices keep (<base>cancels, exact MAXLEN): a consumer that reads
-- them fewer times than this many cancels of running jobs learns the rest at its heartbeat.
local CANCELS_MAXLEN = '1000'

-- The notice a flagged lease's holder is woken by: one entry on <base>cancels, `job <id> fence
-- <fence>` (the lease's fence, so a notice never matches a later lease of the id).
local function notify_holder(notices, id, row)
  redis.call('XADD', notices, 'MAXLEN', CANCELS_MAXLEN, '*', 'job', id,
    'fence', dec(int_field(row_field(row, 'f'), 0)))
end

-- The job ends as cancelled: the row drops its payload and expires retention_ms later, keeping
-- its cancel mark (0: the row is deleted), and the job's ended key wakes its waiters.
local function bury_cancelled(row, ended, retention_ms)
  if retention_ms == 0 then
    redis.call('DEL', row)
    return 'CANCELLED'
  end
  drop_payload(row)
  redis.call('PEXPIRE', row, dec(retention_ms))
  mark_ended(ended, retention_ms)
  return 'CANCELLED'
end
