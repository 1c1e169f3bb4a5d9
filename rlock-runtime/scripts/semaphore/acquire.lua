-- Take a permit of a semaphore atomically; queue the caller if it will wait. (Prepended:
-- queue.lua.) WAITING.md is the protocol this script keeps.
--
-- A semaphore is one sorted set: each permit in use is its owner's token, scored by the end
-- of its lease (ms, Redis's clock), and the member '#permits' is scored by minus the permit
-- count, so the count lives and ends with the permits, and every caller must name the same
-- one. A permit whose lease ended is removed by the next call that looks, which frees it: a
-- crashed holder's permit comes back at its own lease's end.
-- KEYS[1]: semaphore key   KEYS[2]: waiters' queue   KEYS[3]: fence record (declared as the
--          lock's; permits carry no fence)
-- ARGV[1..11]: as the lock's acquire.lua (ARGV[3], the fence flag, is '0'; mode 'm' is not
--          used: Redlock refuses semaphores)
-- ARGV[#ARGV]: the permit count
-- Returns as the lock's acquire.lua, with the earliest permit's remaining lease for pttl; or
-- {4, stored count} when the semaphore was made with another count; {5} when the key holds
-- something else (a lock, a read-write lock).
local sem, queue = KEYS[1], KEYS[2]
local token, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local permits = tonumber(ARGV[#ARGV])

local type_of = redis.call('TYPE', sem)['ok']
if type_of ~= 'zset' and type_of ~= 'none' then
  return {5}
end
local stored = redis.call('ZSCORE', sem, '#permits')
if type_of == 'zset' and not stored then
  -- A sorted set without a count: a read-write lock's holders.
  return {5}
end
if stored and -tonumber(stored) ~= permits then
  return {4, -tonumber(stored)}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', sem, 0, string.format('%.0f', now))

-- Grants `owner` a permit for `ms`; the set lives as long as its longest permit. (Scores
-- are written whole: a Lua number as an argument would be rounded to 14 digits.)
local function take(owner, ms)
  redis.call('ZADD', sem, string.format('%.0f', now + ms), owner, -permits, '#permits')
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

local mine = redis.call('ZSCORE', sem, token)
if mine then
  -- A release handed this waiter a permit before this call came.
  return {2, 0, tonumber(mine) - now}
end
local free = redis.call('ZCOUNT', sem, 0, '+inf') < permits
if mode ~= 'q' then
  if free then
    take(token, lease)
    return {1, 0}
  end
  return {0, earliest_left()}
end

local entry = token .. ' ' .. ARGV[6] .. ' 0'
local fair, queued = ARGV[10] == '1', ARGV[11] == '1'
-- A fair caller takes a free permit only when no live waiter queued before it; free permits
-- go to those waiters first (one of them may be this caller).
while free and fair do
  if not hand_off(sem, queue, nil, ARGV[7], ARGV[8], nil, take) then
    break
  end
  mine = redis.call('ZSCORE', sem, token)
  if mine then
    return {2, 0, tonumber(mine) - now}
  end
  free = redis.call('ZCOUNT', sem, 0, '+inf') < permits
end
if free then
  take(token, lease)
  if queued then
    redis.call('LREM', queue, 1, entry)
  end
  return {1, 0}
end

-- Busy: the caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, entry, queued, ARGV[5], ARGV[9])
if not place then
  return {3, earliest_left()}
end
return {0, place == 0 and earliest_left() or -3}
