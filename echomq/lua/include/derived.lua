-- Keys a transition derives itself (not declared, so the server checks nothing of them): the
-- caller's ACL, the type, a cluster slot that moves.
--- @include "errors"

-- False when the cluster refuses a call naming two keys of the slot, the absent derived key and
-- a declared one: the server answers such a call only while the slot is stable (on a node that
-- imports or exports the slot, a call of several keys not all present is refused), so an absent
-- key may still be on the other node. trafikey's moved_away asks the same question.
local function slot_is_stable(key)
  return type(redis.pcall('EXISTS', key, KEYS[1])) == 'number'
end

-- The type of a derived key, or nil when it may be on another node: the cluster refuses to
-- touch it (it left with its slot), or it is absent while the slot moves (not migrated yet).
local function derived_type(key)
  local reply = redis.pcall('TYPE', key)
  if reply['err'] ~= nil then return nil end
  if reply['ok'] == 'none' and not slot_is_stable(key) then return nil end
  return reply['ok']
end

-- A derived key must be readable and writable by the caller, as a declared key would be.
local function may_access(key)
  return redis.acl_check_cmd('HINCRBY', key, 'a', '1')
end

-- A derived key the call reads or writes: readable and writable by the caller, absent or of the
-- expected type, not on another node. Nil, or the error reply.
local function check_derived(key, expected)
  if not may_access(key) then return redis.error_reply(E_PERM) end
  local t = derived_type(key)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= expected then return redis.error_reply(E_TYPE) end
  return nil
end

-- An item's row, derived from its id: readable and writable by the caller, absent or a hash, not
-- on another node. Nil, or the error reply.
local function check_row(row)
  if not may_access(row) then return redis.error_reply(E_PERM) end
  local t = derived_type(row)
  if t == nil then return redis.error_reply(E_MOVING) end
  if t ~= 'none' and t ~= 'hash' then return redis.error_reply(E_TYPE) end
  return nil
end
