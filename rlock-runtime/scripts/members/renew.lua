-- Renew many leases held as members of a sorted set (the watchdog's batch): a semaphore's
-- permits (ME 'p'), a read-write lock's readers ('r') or writers ('w', scored by minus the end
-- of their lease: see rw/common.lua). (After protocol.lua and
-- state.lua.)
-- KEYS[i]: the set   ARGV[2i-1]: the lease's owner token   ARGV[2i]: its new lease ms
-- Returns one 1 (still ours) or 0 (its lease ended, it was never ours, or the key holds
-- another kind) per key, in order. A renewal never shortens a lease (see the lock's
-- renew.lua).
local now = now_ms()
local sign = ME == 'w' and -1 or 1
-- The member that marks the set as this kind's, read with the lease in one command.
local mark = ME == 'p' and PERMITS_MEMBER or READ_WRITE_MEMBER
local renewed = {}
for i, key in ipairs(KEYS) do
  local owner, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  -- pcall: a key of another type holds no lease of ours, and must not fail the batch.
  local scores = redis.pcall('ZMSCORE', key, mark, owner)
  local ends = 0
  if not scores['err'] and scores[1] and scores[2] then
    ends = sign * tonumber(scores[2])
  end
  if ends > now then
    if now + ms > ends then
      score_members(key, string.format('%.0f', sign * (now + ms)), owner, true)
    end
    expire_at_least(key, ms)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
