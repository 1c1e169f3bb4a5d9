-- Who holds a lock, for how long, and how many wait, in one atomic read (for
-- `LockClient::inspect`).
-- KEYS[1]: lock key   KEYS[2]: its waiters' queue, where it keeps one (absent on Redlock)
-- Returns {token or false, pttl, queue length (-1 without a queue), 0, {}}: pttl as PTTL
-- gives it (-2: no key, -1: no expiry). (The last two are a semaphore's count and permits,
-- so that every kind's inspection answers alike.)
-- pcall: a key of another type is nobody's lock here.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then
  holder = false
end
local queued = -1
if KEYS[2] then
  queued = redis.pcall('LLEN', KEYS[2])
  if type(queued) ~= 'number' then
    queued = 0
  end
end
return {holder, redis.call('PTTL', KEYS[1]), queued, 0, {}}
