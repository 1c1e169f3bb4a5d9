-- Give a permit back if it is still ours, handing each free permit to the first live waiter
-- queued for the semaphore (named in an announcement); a waiter leaving the queue also gives
-- up its entry. (Prepended: queue.lua.) WAITING.md is the protocol it keeps.
-- KEYS[1]: semaphore key   KEYS[2]: waiters' queue   KEYS[3]: fence record, when declared
-- ARGV: as the lock's release.lua: ARGV[1] owner token; ARGV[2] 'q' (the default when
--       absent); ARGV[3] the sharded release channel on Redis Cluster, absent or empty on
--       one server; ARGV[4] '1' when a waiter leaves the queue, with its entry's handoff
--       lease ms and fence flag in ARGV[5] and ARGV[6]
-- Returns 1 when the permit was ours (given back or handed on), 0 when it had ended or was
-- never ours. (Permits carry no fence, so a release never asks again with the fence record.)
local sem, queue, token, leaving = KEYS[1], KEYS[2], ARGV[1], ARGV[4] == '1'
local channel, publish = ARGV[3], 'SPUBLISH'
if channel == nil or channel == '' then
  channel, publish = 'rlock:released:', 'PUBLISH'
end
if leaving then
  redis.call('LREM', queue, 1, token .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
end
-- pcall: a key of another type holds no permit of ours.
local ours = redis.pcall('ZREM', sem, token) == 1
if redis.call('TYPE', sem)['ok'] ~= 'zset' then
  return ours and 1 or 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', sem, 0, string.format('%.0f', now))
local stored = redis.call('ZSCORE', sem, '#permits')
local permits = stored and -tonumber(stored) or 0

local function take(owner, ms)
  redis.call('ZADD', sem, string.format('%.0f', now + ms), owner)
  if redis.call('PTTL', sem) < tonumber(ms) then
    redis.call('PEXPIRE', sem, ms)
  end
end

-- Each free permit goes to the next live waiter: the one this release gave back, and any
-- whose lease ended unreleased. (A waiter leaving may have been the one a release told.)
if ours or leaving then
  while redis.call('ZCOUNT', sem, 0, '+inf') < permits do
    if not hand_off(sem, queue, nil, channel, publish, nil, take) then
      break
    end
  end
end
if redis.call('ZCARD', sem) <= 1 then
  -- No permit in use: the count goes with the last one.
  redis.call('DEL', sem)
end
return ours and 1 or 0
