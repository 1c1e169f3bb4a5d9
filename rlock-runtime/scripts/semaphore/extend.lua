-- Set a permit's lease to exactly a new length, only if it is still ours.
-- KEYS[1]: semaphore key   ARGV[1]: the permit's owner token   ARGV[2]: new lease ms
-- Returns 1 when set, 0 when its lease had ended or it was never ours.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local sem, owner, ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
-- pcall: a key of another type holds no permit of ours.
local ends = redis.pcall('ZSCORE', sem, owner)
if type(ends) ~= 'string' or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', sem, 'XX', string.format('%.0f', now + ms), owner)
-- The set lives as long as its longest permit: never shortened for this one.
if redis.call('PTTL', sem) < ms then
  redis.call('PEXPIRE', sem, ms)
end
return 1
