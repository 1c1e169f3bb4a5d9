-- Take several locks of one cluster slot (all of them on one server), all or none, in one
-- atomic step (`lock_all`). (After protocol.lua and state.lua.)
-- KEYS: the locks   ARGV[1]: the lease ms   ARGV[1 + i]: the owner token for KEYS[i]: a new
-- one, or the token of a hold the caller has of it already (a key it was handed while
-- waiting, or one its locked scope holds), whose lease is set anew
-- Returns {TAKEN}, every key the caller's now; {BUSY, i}, KEYS[i] another's and nothing
-- taken; {OTHER_KIND, i, what KEYS[i] holds}, nothing taken.
local lease = ARGV[1]
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type is another kind's, refused with what it is.
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' then
    return {OTHER_KIND, i, (kind_of(key))}
  end
  if holder and holder ~= ARGV[1 + i] then
    return {BUSY, i}
  end
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1 + i], 'PX', lease)
end
return {TAKEN}
