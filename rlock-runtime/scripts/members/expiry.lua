-- The expiry of a sorted set of leases (a semaphore's permits, a read-write lock's holders),
-- shared by the scripts that may end or shorten one of them (after protocol.lua).

-- Keeps `set` alive exactly until its latest lease ends: each lease is scored by its end (a
-- writer's by minus it), so the latest end is the highest positive score or, for a
-- read-write lock, minus the lowest negative one (a semaphore's only negative score is its
-- count's, which is never read as an end). With no
-- lease left after `now`, the set goes, and with it what marks the name's kind: the name is
-- free for any kind from then.
local function expire_with_latest(set, now)
  local top = redis.call('ZREVRANGEBYSCORE', set, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  local latest = tonumber(top[2] or 0)
  if ME ~= 'p' then
    local bottom = redis.call('ZRANGEBYSCORE', set, '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
    latest = math.max(latest, -tonumber(bottom[2] or 0))
  end
  if latest <= now then
    redis.call('DEL', set)
  else
    redis.call('PEXPIREAT', set, string.format('%.0f', latest))
  end
end
