-- A read-write lock's holders, shared by its acquire and release scripts (after queue.lua;
-- ME is 'w' in the writer's scripts, 'r' in the readers').
--
-- A read-write lock is one sorted set: each reader's token scored by the end of its lease
-- (ms, Redis's clock), and the writer's, if any, scored by minus the end of its lease, so
-- that the two are told apart by sign alone and each lease ends on its own: a crashed
-- reader's share comes back at its own lease's end, whatever the others do. Beside them,
-- READ_WRITE_MEMBER scored 0 marks the set as a read-write lock's (no range of holders
-- reaches 0); it lives and ends with the holders.
local rw = KEYS[1]
local writing = ME == 'w'
local now = now_ms()

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

-- Drops the leases that ended (readers' ends in (0, now]; the writer's, at most one, when
-- minus its score is at most now) and returns the writer's token, false when none holds.
local function purge()
  redis.call('ZREMRANGEBYSCORE', rw, '(0', string.format('%.0f', now))
  local w = redis.call('ZRANGEBYSCORE', rw, '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  known_writer = w[1] or false
  if known_writer and -tonumber(w[2]) <= now then
    redis.call('ZREM', rw, known_writer)
    known_writer = false
  end
  return known_writer
end

-- How many hold it: every member but the mark, which a set of this kind always has.
local function holders()
  return math.max(redis.call('ZCARD', rw) - 1, 0)
end

-- Grants `owner` the lock as `letter` ('w' the writer, 'r' a reader) for `ms`; the set lives
-- as long as its longest lease. (Scores are written whole: a Lua number as an argument would
-- be rounded to 14 digits.)
local function take(owner, ms, letter)
  local ends = now + tonumber(ms)
  if letter == 'w' then
    ends = -ends
  end
  redis.call('ZADD', rw, string.format('%.0f', ends), owner, 0, READ_WRITE_MEMBER)
  if letter == 'w' then
    known_writer = owner
  end
  if redis.call('PTTL', rw) < tonumber(ms) then
    redis.call('PEXPIRE', rw, ms)
  end
end

-- Whether a waiter of `letter` can be granted now: a writer when nobody holds the lock, a
-- reader when no writer does.
local function fits(letter)
  if letter == 'w' then
    return holders() == 0
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
