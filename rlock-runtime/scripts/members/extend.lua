-- Set a lease held as a member of a sorted set (a permit, a reader's or the writer's: see
-- members/renew.lua) to exactly a new length, only if it is still ours. (After protocol.lua,
-- state.lua and members/expiry.lua.)
-- With a successor, it becomes the lease's owner in our place (a hold taken over by another
-- client): its members replace ours, with the new lease.
-- KEYS[1]: the set   ARGV[1]: the lease's owner token   ARGV[2]: new lease ms
-- ARGV[3]: the successor's owner token (a semaphore's: of as many permits), or absent
-- Returns 1 when set, 0 when its lease had ended, it was never ours, or the key holds another
-- kind.
local now = now_ms()
local sign = ME == 'w' and -1 or 1
local mark = ME == 'p' and PERMITS_MEMBER or READ_WRITE_MEMBER
local set, owner, ms, successor = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- pcall: a key of another type holds no lease of ours.
local scores = redis.pcall('ZMSCORE', set, mark, owner)
if scores['err'] or not scores[1] or not scores[2] or sign * tonumber(scores[2]) <= now then
  return 0
end
if successor then
  remove_members(set, owner)
  score_members(set, string.format('%.0f', sign * (now + ms)), successor)
  if ME == 'u' then
    -- The upgradeable reader's name follows its lease.
    redis.call('ZREM', set, UPGRADER_MARK .. owner)
    redis.call('ZADD', set, 0, UPGRADER_MARK .. successor)
  end
else
  score_members(set, string.format('%.0f', sign * (now + ms)), owner, true)
end
-- The set lives until its latest lease ends, this one's or another's.
expire_with_latest(set, now)
return 1
