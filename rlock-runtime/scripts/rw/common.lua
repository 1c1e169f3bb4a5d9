-- A read-write lock's holders, shared by its acquire and release scripts (prepended after
-- queue.lua; `writing` is set before it, true in the writer's scripts).
--
-- A read-write lock is one sorted set: each reader's token scored by the end of its lease
-- (ms, Redis's clock), and the writer's, if any, scored by minus the end of its lease, so
-- that the two are told apart by sign alone and each lease ends on its own: a crashed
-- reader's share comes back at its own lease's end, whatever the others do. Nothing else is
-- stored in it (a semaphore's set holds its count, which tells the two apart).
local rw = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- The writer's token, or false when no writer holds; nil until read. One read serves the
-- whole script: `purge` reads it, and `take` keeps it true.
local known_writer = nil

-- The writer's token, if a writer holds the lock.
local function writer()
  if known_writer == nil then
    known_writer = redis.call('ZRANGEBYSCORE', rw, '-inf', '(0', 'LIMIT', 0, 1)[1] or false
  end
  return known_writer
end

-- Drops the leases that ended (readers' ends in [0, now]; the writer's, at most one, when
-- minus its score is at most now) and returns the writer's token, false when none holds.
local function purge()
  redis.call('ZREMRANGEBYSCORE', rw, 0, string.format('%.0f', now))
  local w = redis.call('ZRANGEBYSCORE', rw, '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  known_writer = w[1] or false
  if known_writer and -tonumber(w[2]) <= now then
    redis.call('ZREM', rw, known_writer)
    known_writer = false
  end
  return known_writer
end

-- Grants `owner` the lock as `role` ('w' the writer, 'r' a reader) for `ms`; the set lives
-- as long as its longest lease. (Scores are written whole: a Lua number as an argument would
-- be rounded to 14 digits.)
local function take(owner, ms, role)
  local ends = now + tonumber(ms)
  if role == 'w' then
    ends = -ends
  end
  redis.call('ZADD', rw, string.format('%.0f', ends), owner)
  if role == 'w' then
    known_writer = owner
  end
  if redis.call('PTTL', rw) < tonumber(ms) then
    redis.call('PEXPIRE', rw, ms)
  end
end

-- Whether a waiter of `role` can be granted now: a writer when nobody holds the lock, a
-- reader when no writer does.
local function fits(role)
  if role == 'w' then
    return redis.call('ZCARD', rw) == 0
  end
  return not writer()
end

-- How long until a caller of this script's role could be granted, as far as the holders'
-- leases tell: a writer waits for every lease, a reader for the writer's; -3 when unknown.
local function left()
  local last = nil
  if writing then
    local latest = redis.call('ZREVRANGEBYSCORE', rw, '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
    last = latest[2] and tonumber(latest[2])
  end
  local w = redis.call('ZRANGEBYSCORE', rw, '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  if w[2] and (not last or -tonumber(w[2]) > last) then
    last = -tonumber(w[2])
  end
  if last then
    return last - now
  end
  return -3
end
