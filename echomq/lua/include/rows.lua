-- The job row's four one-letter fields (p, a, t, f) on a row an earlier release wrote too: such a
-- row names them payload, attempts, enqueued_at and fence until a lease or echomq migrate rewrites
-- it (docs/PROTOCOL.md, "The job row"), and every transition reads it as a row of this layout.
local OLD_NAME = { p = 'payload', a = 'attempts', t = 'enqueued_at', f = 'fence' }

-- HMGET of a row's fields (each absent one false), one of the four taken from its earlier name
-- when its own is absent: one HMGET of the names given, then the earlier names among them.
local function row_fields(row, ...)
  local names = { ... }
  local n, from = #names, {}
  for i = 1, n do
    local old = OLD_NAME[names[i]]
    if old then
      names[#names + 1] = old
      from[i] = #names
    end
  end
  local v = redis.call('HMGET', row, unpack(names))
  for i = 1, n do
    if v[i] == false and from[i] then v[i] = v[from[i]] end
  end
  return v
end

-- One of the four fields of a row (row_fields), false when absent under both names.
local function row_field(row, name)
  return row_fields(row, name)[1]
end

-- Whether a row holds its payload, under either name: a live job's row does, a tombstone not.
local function has_payload(row)
  return redis.call('HEXISTS', row, 'p') == 1 or redis.call('HEXISTS', row, 'payload') == 1
end

-- The row drops its payload under either name (one HDEL), becoming a tombstone.
local function drop_payload(row)
  redis.call('HDEL', row, 'p', 'payload')
end
