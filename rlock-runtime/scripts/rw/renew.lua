-- Renew many leases of read-write locks in one call (the watchdog's batch); `writing` is set
-- before it, true for the writer's leases (scored by minus their end: see rw/common.lua).
-- KEYS[i]: the lock's sorted set   ARGV[2i-1]: the lease's owner token   ARGV[2i]: new lease ms
-- Returns one 1 (still ours) or 0 (its lease ended, or it was never ours) per key, in order.
-- A renewal never shortens a lease (see the lock's renew.lua).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local sign = writing and -1 or 1
local renewed = {}
for i, key in ipairs(KEYS) do
  local owner, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  -- pcall: a key of another type holds no lease of ours, and must not fail the batch.
  local score = redis.pcall('ZSCORE', key, owner)
  local ends = type(score) == 'string' and sign * tonumber(score) or 0
  if ends > now then
    if now + ms > ends then
      redis.call('ZADD', key, 'XX', string.format('%.0f', sign * (now + ms)), owner)
    end
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
