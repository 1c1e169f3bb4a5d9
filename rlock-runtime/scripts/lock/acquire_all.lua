-- Take several locks of one cluster slot (all of them on one server), all or none, in one
-- atomic step (`lock_all`). (After protocol.lua and state.lua.)
-- KEYS: the locks   ARGV[1]: the lease ms   ARGV[2]: one letter per key, 'h' for a key the
-- caller holds already (handed to it while it waited, or held by its locked scope), 'n' for
-- a new one   ARGV[2 + i]: the owner token for KEYS[i]: a new one, or that hold's token
-- A held key's lease is set anew only while the key still holds its token: a hold that
-- ended (its lease, its release) is not taken again, whenever this call runs. (A call held
-- back on its way, whose caller was cut meanwhile, may run after the release of the very
-- hold it names, sent on another connection: it must leave that key free.)
-- Returns {TAKEN}, every key the caller's now; {BUSY, i}, KEYS[i] another's and nothing
-- taken; {NOT_HELD, i}, KEYS[i] was held and no longer holds its token, nothing taken;
-- {OTHER_KIND, i, what KEYS[i] holds}, nothing taken.
local lease, held = ARGV[1], ARGV[2]
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type is another kind's, refused with what it is.
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' then
    return {OTHER_KIND, i, (kind_of(key))}
  end
  if string.sub(held, i, i) == 'h' then
    if holder ~= ARGV[2 + i] then
      return {NOT_HELD, i}
    end
  elseif holder then
    return {BUSY, i}
  end
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[2 + i], 'PX', lease)
end
return {TAKEN}
