-- Renew many locks in one call (the watchdog's batch).
-- KEYS[i]: lock key   ARGV[2i-1]: its owner token   ARGV[2i]: its new lease in milliseconds
-- Returns one 1 (still ours) or 0 (expired, another owner's, or the key holds another kind)
-- per key, in order.
--
-- A renewal never shortens a lease: it may reach Redis after an `extend` to a longer lease
-- that was sent later (a delayed packet, a reply that came late), and must not undo it.
-- PEXPIRE's GT flag (Redis 7.0 and later, Valkey) keeps the longer one in the same command,
-- so a key costs two commands; before 7.0 the lease is read first (three).
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
local renewed = {}
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type (WRONGTYPE) is not ours, and must not fail the batch; a
  -- string is what a lock holds, so our token in it is our lock.
  if redis.pcall('GET', key) == ARGV[2 * i - 1] then
    local lease = ARGV[2 * i]
    if gt then
      redis.call('PEXPIRE', key, lease, 'GT')
    elseif redis.call('PTTL', key) < tonumber(lease) then
      redis.call('PEXPIRE', key, lease)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
