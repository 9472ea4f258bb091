--[[
  after: register a waiting job's parents, in order, and seal its list (seal not 0).
    KEYS[1] <base>waiting    jobs waiting for their parents (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>dead       jobs that used up their attempts (zset)
    KEYS[4] <base>job:<id>   the waiting job's row (hash)
    KEYS[5] <base>wake       wake tokens (list)
    KEYS[6] <base>events     optional: the queue's events (stream), the last key
    ARGV[1] id               JOB:<rest>, the waiting job
    ARGV[2] now              ms, or * for the server clock
    ARGV[3] seal             integer >= 0; not 0: no more parents, the job runs once they finish
    ARGV[4..] parents        each an id (JOB:<rest>)
  Derived: each parent's row, in order; then the keys the moves derive (include/dependents.lua).
  A parent live (its row holds a payload, not dead) gets the id in its `next`, once, and the
  id's waits one more; a parent done (a tombstone, or no row) counts nothing; dead: the id's
  policy (fail: the id dies, ignore: nothing, continue: the id is released); cancelled: the id is
  cancelled. A job that dies or is cancelled so ends its own dependents in turn.
  Replies: +WAITING | +READY | +DEAD | +CANCELLED | +NOTWAITING | +SEALED | EMQARITY, EMQKIND,
  EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
--- @include "args"
--- @include "dependents"
--- @include "derived"
--- @include "errors"
--- @include "keys"
--- @include "numbers"
--- @include "rows"
if #KEYS < 5 or #KEYS > 6 or #ARGV < 3 then return variadic_arity_error('AFTER', 5, 3) end
local id = ARGV[1]
if not id_ok(id) then return redis.error_reply(E_KIND) end
local base = keys_base({ 'waiting', 'pending', 'dead', 'job:' .. id, 'wake' })
local _, events_key = optional_keys(base, 5, false)
if events_key == false then return redis.error_reply(E_KEYS) end
local now = now_arg(ARGV[2])
if now == nil then return redis.error_reply(E_NOW) end
local seal = int_arg(ARGV[3], 0)
if seal == nil then return number_error('seal', 0) end
for n = 4, #ARGV do
  if not id_ok(ARGV[n]) then return redis.error_reply(E_KIND) end
end
if not types_ok({ 'zset', 'zset', 'zset', 'hash', 'list' }) then return redis.error_reply(E_TYPE) end
if events_key and not events_type_ok(events_key) then return redis.error_reply(E_TYPE) end

local waiting, dead, row = KEYS[1], KEYS[3], KEYS[4]
for n = 4, #ARGV do
  local err = check_row(base .. 'job:' .. ARGV[n])
  if err then return err end
end
if redis.call('ZSCORE', waiting, id) == false then return redis.status_reply('NOTWAITING') end
if redis.call('HEXISTS', row, 'hold') == 0 then return redis.status_reply('SEALED') end

local waits = count_field(redis.call('HGET', row, 'waits'))
if waits == nil then return waits_error() end

local j = new_join(base, now, events_key)
local me = { row = row, waiting = true, hold = true, waits = waits,
             policy = redis.call('HGET', row, 'policy') or 'fail' }
j.state[id] = me
local verdict = 'WAITING'
for n = 4, #ARGV do
  if not me.waiting then break end
  local p = ARGV[n]
  if p ~= id then
    local prow = base .. 'job:' .. p
    if redis.call('EXISTS', prow) == 0 then -- done, forgotten
    elseif redis.call('ZSCORE', dead, p) ~= false then
      if me.policy == 'continue' then
        plan_release(j, id, me)
        verdict = 'READY'
      elseif me.policy ~= 'ignore' then
        local text = 'parent ' .. p .. ' died: ' .. (redis.call('HGET', prow, 'error') or '')
        plan_fail(j, id, me, text)
        plan_end(j, id, row, 'dead', text)
        verdict = 'DEAD'
      end
    elseif not has_payload(prow) then
      if redis.call('HEXISTS', prow, 'cancelled') == 1 then
        local mark = mark_of(prow)
        plan_cancel(j, id, me, mark)
        plan_end(j, id, row, 'cancelled', mark)
        verdict = 'CANCELLED'
      end -- else done: a tombstone
    else -- live
      local linked = false
      local ids = next_of(j, p, redis.call('HGET', prow, 'next'))
      for m = 1, #ids do
        if ids[m] == id then linked = true end
      end
      if not linked then
        j.next_add[p] = j.next_add[p] or {}
        table.insert(j.next_add[p], id)
        j.steps[#j.steps + 1] = { op = 'link', row = prow, child = id }
        j.steps[#j.steps + 1] = { op = 'incr', row = row }
        me.waits = me.waits + 1
      end
    end
  end
  if j.failure then return j.failure end
end
if seal ~= 0 and me.waiting then
  if me.waits - 1 <= 0 then
    plan_release(j, id, me)
    verdict = 'READY'
  else
    j.steps[#j.steps + 1] = { op = 'seal', row = row }
  end
end
if j.failure then return j.failure end
apply_steps(j, 1)
return redis.status_reply(verdict)
