-- Set a read-write lock's lease (a reader's, or the writer's when `writing`, set before it)
-- to exactly a new length, only if it is still ours.
-- KEYS[1]: the lock's sorted set   ARGV[1]: the lease's owner token   ARGV[2]: new lease ms
-- Returns 1 when set, 0 when its lease had ended or it was never ours.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local sign = writing and -1 or 1
local rw, owner, ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
-- pcall: a key of another type holds no lease of ours.
local score = redis.pcall('ZSCORE', rw, owner)
if type(score) ~= 'string' or sign * tonumber(score) <= now then
  return 0
end
redis.call('ZADD', rw, 'XX', string.format('%.0f', sign * (now + ms)), owner)
-- The set lives as long as its longest lease: never shortened for this one.
if redis.call('PTTL', rw) < ms then
  redis.call('PEXPIRE', rw, ms)
end
return 1
