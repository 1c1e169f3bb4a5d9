-- Who holds a lock, for how long, and how many wait, in one atomic read (for
-- `LockClient::inspect`).
-- KEYS[1]: lock key   KEYS[2]: its waiters' queue, where it keeps one (absent on Redlock)
-- Returns, as every kind's inspection: {what the key holds (protocol.lua's kinds), the
-- holder's token or false, pttl, queue length (-1 without a queue), 0, {}, 0}: pttl as PTTL
-- gives it (-2: no key, -1: no expiry). (The last three are a semaphore's count, holders and
-- permits in use.) A key of another kind is not read.
local found = kind_of(KEYS[1])
local queued = -1
if KEYS[2] then
  queued = redis.pcall('LLEN', KEYS[2])
  if type(queued) ~= 'number' then
    queued = 0
  end
end
if found ~= LOCK then
  return {found, false, -2, queued, 0, {}, 0}
end
return {found, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), queued, 0, {}, 0}
