-- Renew many permits in one call (the watchdog's batch).
-- KEYS[i]: semaphore key   ARGV[2i-1]: the permit's owner token   ARGV[2i]: its new lease ms
-- Returns one 1 (still ours) or 0 (its lease ended, or it was never ours) per key, in order.
-- A renewal never shortens a lease (see the lock's renew.lua).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local renewed = {}
for i, key in ipairs(KEYS) do
  local owner, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  -- pcall: a key of another type holds no permit of ours, and must not fail the batch.
  local ends = redis.pcall('ZSCORE', key, owner)
  if type(ends) == 'string' and tonumber(ends) > now then
    if now + ms > tonumber(ends) then
      redis.call('ZADD', key, 'XX', string.format('%.0f', now + ms), owner)
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
