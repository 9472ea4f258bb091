-- Claim records (the twin of native/claimrecord.c), for the transitions that take one (claim,
-- settle, lane_claim: Transition.record). A claiming call may declare one more key after its
-- own: its record, <base>claim:<claim_id>, the claim id chosen by the caller (1 to 200 bytes of
-- A-Z a-z 0-9 . _ : -, as a lane name; optional_keys in keys.lua checks the name). A call that leases jobs records them there, '<id> <fence>'
-- each, space-separated, for lease_ms. Sent again with the same record after its reply was lost,
-- the call finds the record and answers, in order, the leases recorded that are still held (the
-- id in active, its row at that fence): no attempt is counted again and nothing more is leased.
-- A value that is not such a list holds no lease.
--- @include "args"
--- @include "derived"
--- @include "keys"
--- @include "leases"
--- @include "numbers"
-- The record's type, checked after the call's own keys: absent or a string.
local function record_type_ok(key)
  local t = key_type(key)
  return t == 'none' or t == 'string'
end

-- The '<id> <fence>' pairs of a record's value, or nil when it is not such a list.
local function parse_record(value)
  local leases, pos = {}, 1
  while true do
    local space = string.find(value, ' ', pos, true)
    if space == nil then return nil end
    local id = string.sub(value, pos, space - 1)
    local next_space = string.find(value, ' ', space + 1, true)
    local fence = int_arg(string.sub(value, space + 1, (next_space or #value + 1) - 1), 1)
    if not id_ok(id) or fence == nil then return nil end
    leases[#leases + 1] = { id = id, fence = fence }
    if next_space == nil then return leases end
    pos = next_space + 1
  end
end

-- The leases of the call's record (key nil: it declares none): nil when there is no record, else
-- its leases (maybe none), each row checked as any row the call reads; nil and the error reply
-- when a row cannot be read.
local function read_record(base, key)
  if key == nil then return nil end
  local value = redis.call('GET', key)
  if value == false then return nil end
  local leases = parse_record(value) or {}
  for i = 1, #leases do
    leases[i].row = base .. 'job:' .. leases[i].id
    local err = check_row(leases[i].row)
    if err then return nil, err end
  end
  return leases
end

-- The recorded leases still held, in order, each as a claim replies it: id, payload, attempt,
-- fence.
local function held_leases(active, leases)
  local jobs = {}
  for i = 1, #leases do
    local l = leases[i]
    if is_current_lease(active, l.row, l.id, l.fence) then
      jobs[#jobs + 1] = { l.id, redis.call('HGET', l.row, 'p') or '',
        int_field(redis.call('HGET', l.row, 'a'), 0), l.fence }
    end
  end
  return jobs
end

-- Record the leases just made (each { id, fence }) for lease_ms, when the call declares a record.
local function write_record(key, leases, lease_ms)
  if key == nil or #leases == 0 then return end
  local parts = {}
  for i = 1, #leases do parts[i] = leases[i][1] .. ' ' .. dec(leases[i][2]) end
  redis.call('SET', key, table.concat(parts, ' '), 'PX', dec(lease_ms))
end
