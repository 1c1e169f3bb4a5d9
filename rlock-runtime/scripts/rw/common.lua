-- A read-write lock's holders, shared by its acquire and release scripts (after queue.lua;
-- ME is 'w' in the writer's scripts, 'r' in the readers', 'u' in the upgradeable reader's).
--
-- A read-write lock is one sorted set: each reader's token scored by the end of its lease
-- (ms, Redis's clock), and the writer's, if any, scored by minus the end of its lease, so
-- that the two are told apart by sign alone and each lease ends on its own: a crashed
-- reader's share comes back at its own lease's end, whatever the others do. Beside them,
-- READ_WRITE_MEMBER scored 0 marks the set as a read-write lock's (no range of holders
-- reaches 0); it lives and ends with the holders.
--
-- The upgradeable reader, at most one, reads as a reader does (its token scored by the end
-- of its lease), and is named beside the mark by UPGRADER_MARK .. its token, scored 0, so
-- that one bounded read finds it without looking at the readers. A name whose reader's
-- lease ended (purged, or given back by a reader's release) names nobody: it is dropped
-- when next read. Its upgrade is a writer's lease beside it, whose token names it
-- (`upgrade_of`): granted once it is the only holder, and put first in the queue, so that
-- no writer comes between and no reader comes in meanwhile.
local rw = KEYS[1]
local writing = ME == 'w'
local now = now_ms()

-- The upgradeable reader whose upgrade `token` is ('<client>:<n>^<its number>'), or nil.
local function upgrade_of(token)
  local client, number = string.match(token, '^([^:]*):%d+%^(%d+)$')
  return client and (client .. ':' .. number)
end

-- The upgradeable reader's token, or false when none holds; nil until read.
local known_upgrader = nil

-- The upgradeable reader's token, if one holds a live lease. The mark's other members
-- scored 0 are at most the mark and one name (a name is written only when no live one
-- is there, and a dead one is dropped here first).
local function upgrader()
  if known_upgrader == nil then
    known_upgrader = false
    local named = redis.call('ZRANGEBYSCORE', rw, 0, 0, 'LIMIT', 0, 3)
    for _, member in ipairs(named) do
      if string.sub(member, 1, #UPGRADER_MARK) == UPGRADER_MARK then
        local token = string.sub(member, #UPGRADER_MARK + 1)
        local ends = redis.call('ZSCORE', rw, token)
        if ends and tonumber(ends) > now then
          known_upgrader = token
        else
          redis.call('ZREM', rw, member)
        end
      end
    end
  end
  return known_upgrader
end

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
  known_upgrader = nil
  local w = redis.call('ZRANGEBYSCORE', rw, '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
  known_writer = w[1] or false
  if known_writer and -tonumber(w[2]) <= now then
    redis.call('ZREM', rw, known_writer)
    known_writer = false
  end
  return known_writer
end

-- How many hold it: every member but those scored 0 (the mark, and the upgradeable
-- reader's name).
local function holders()
  return redis.call('ZCARD', rw) - redis.call('ZCOUNT', rw, 0, 0)
end

-- Whether the set does not exist yet, so that the next `take` creates it (with no expiry to
-- keep): each script sets it from what it found the key holding, before any `take`.
local creating = false

-- Grants `owner` the lock as `letter` ('w' the writer, 'r' a reader, 'u' the upgradeable
-- reader) for `ms`; the set lives as long as its longest lease. (Scores are written whole: a
-- Lua number as an argument would be rounded to 14 digits.)
local function take(owner, ms, letter)
  local ends = now + tonumber(ms)
  if letter == 'w' then
    ends = -ends
  end
  redis.call('ZADD', rw, string.format('%.0f', ends), owner, 0, READ_WRITE_MEMBER)
  if letter == 'w' then
    known_writer = owner
  elseif letter == 'u' then
    redis.call('ZADD', rw, 0, UPGRADER_MARK .. owner)
    known_upgrader = owner
  end
  expire_at_least(rw, ms, creating)
  creating = false
end

-- Whether a waiter of `letter` under `token` can be granted now: a writer when nobody holds
-- the lock; an upgrade when its upgradeable reader is the only holder (DROP when that
-- reader no longer holds: it never will fit); the upgradeable reader when no writer and no
-- other upgradeable reader holds; a reader when no writer does.
local function fits(letter, token)
  if letter == 'w' then
    local upgrading = upgrade_of(token)
    if not upgrading then
      return holders() == 0
    end
    if upgrader() ~= upgrading then
      return DROP
    end
    return not writer() and holders() == 1
  end
  if letter == 'u' and upgrader() then
    return false
  end
  return not writer()
end

-- How long until a caller of this script's role could be granted, as far as the holders'
-- leases tell: a writer waits for every lease, a reader for the writer's; NOT_TOLD when unknown.
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
  return NOT_TOLD
end
