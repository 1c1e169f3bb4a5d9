-- Renew many leases in one call (the watchdog's batch).
-- KEYS[i]: lock key   ARGV[2i-1]: its owner token   ARGV[2i]: its new lease in milliseconds
-- Returns one 1 (renewed) or 0 (expired, or another owner's) per key, in order.
local renewed = {}
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type (WRONGTYPE) is not ours, and must not fail the batch.
  if redis.pcall('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
