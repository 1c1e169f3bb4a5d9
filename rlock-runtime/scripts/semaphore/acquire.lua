-- Take a permit of a semaphore atomically; queue the caller if it will wait. (After
-- protocol.lua, calls/acquire.lua, state.lua and queue.lua.) WAITING.md is the protocol
-- this script keeps.
--
-- A semaphore is one sorted set: each permit in use is its owner's token, scored by the end
-- of its lease (ms, Redis's clock), and PERMITS_MEMBER is scored by minus the permit count,
-- so the count lives and ends with the permits, every caller must name the same one, and
-- the set is told from any other by it. A permit whose lease ended is removed by the next
-- call that looks, which frees it: a crashed holder's permit comes back at its own lease's
-- end.
-- KEYS: as the lock's (the fence record is declared, never written: permits carry no fence)
-- own: the permit count. (The fence flag is ignored; mode 'm' is not used: Redlock refuses
-- semaphores.)
-- Returns as the lock's acquire.lua (with the earliest permit's remaining lease for pttl), or
-- {OTHER_COUNT, stored count}, or {OTHER_KIND, what the key holds}.
local sem, queue = KEYS[1], KEYS[2]
local permits = tonumber(own)

local found, scores = kind_of(sem, token)
if found ~= SEMAPHORE and found ~= FREE then
  return {OTHER_KIND, found}
end
if found == SEMAPHORE and -tonumber(scores[1]) ~= permits then
  return {OTHER_COUNT, -tonumber(scores[1])}
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', sem, 0, string.format('%.0f', now))

-- Grants `owner` a permit for `ms`; the set lives as long as its longest permit. (Scores
-- are written whole: a Lua number as an argument would be rounded to 14 digits.)
local function take(owner, ms)
  redis.call('ZADD', sem, string.format('%.0f', now + ms), owner, -permits, PERMITS_MEMBER)
  if redis.call('PTTL', sem) < tonumber(ms) then
    redis.call('PEXPIRE', sem, ms)
  end
end

-- What is left of the earliest-ending permit's lease: when the next one may come free.
local function earliest_left()
  local first = redis.call('ZRANGEBYSCORE', sem, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then
    return tonumber(first[2]) - now
  end
  return -2
end

-- A permit a release handed this waiter before this call came, if any.
local function handed()
  local ends = redis.call('ZSCORE', sem, token)
  if ends then
    return {HANDED, 0, tonumber(ends) - now}
  end
end

-- A permit a release handed this waiter, read with the kind; one whose lease ended is none.
if scores and scores[3] and tonumber(scores[3]) > now then
  return {HANDED, 0, tonumber(scores[3]) - now}
end
local free = redis.call('ZCOUNT', sem, 0, '+inf') < permits
if mode ~= 'q' then
  if free then
    take(token, lease)
    return {TAKEN, 0}
  end
  return {BUSY, earliest_left()}
end

-- Its entry carries the count: a release serves only waiters of its own count.
local served = ME .. permits
local mine = entry(token, handoff, '0', served)
-- A fair caller takes a free permit only when no live waiter queued before it; free permits
-- go to those waiters first (one of them may be this caller).
if fair then
  for _ = 1, MOST_ENTRIES do
    if not free or hand_off(sem, queue, nil, channel, publish, nil, take, nil, served)
      ~= 'handed' then
      break
    end
    local given = handed()
    if given then
      return given
    end
    free = redis.call('ZCOUNT', sem, 0, '+inf') < permits
  end
end
if free then
  take(token, lease)
  if queued then
    redis.call('LREM', queue, 1, mine)
  end
  return {TAKEN, 0}
end

-- Busy: the caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, mine, queued, mode_lease, most)
if not place then
  return {FULL, earliest_left()}
end
return {BUSY, place == 0 and earliest_left() or -3}
