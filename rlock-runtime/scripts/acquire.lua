-- Acquire a lock, and issue its fencing token if asked, atomically.
-- KEYS[1]: lock key   KEYS[2]: fence key   KEYS[3]: waiters key (all in one cluster slot)
-- ARGV[1]: owner token   ARGV[2]: lease in milliseconds   ARGV[3]: '1' to issue a fence
-- ARGV[4]: for a caller that will wait, how long (ms) its waiters mark should outlive the
--          holder's lease; '0' for a caller that will not wait
-- Returns {1, fence or 0} when acquired, {0, pttl} when another owner holds the lock.
--
-- A waiting caller marks the key as awaited until a little after the holder's lease ends
-- (by when it tries again and renews the mark), so that the release announces itself.
--
-- The lock key holds the plain token with a PX expiry, the format redis-py's Lock and the
-- SET NX PX + Lua release recipe use, so other clients locking the same key exclude us.
-- Fence = max(last fence + 1, server time in microseconds). The fence record expires with the
-- lease, so no per-key record outlives its lock; once it is gone, the server clock (which
-- moved on by at least the lease) keeps the next fence above every earlier one.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  local now = redis.call('TIME')
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  -- pcall: a fence key of another type (WRONGTYPE) counts as no record; it is replaced.
  local last = redis.pcall('GET', KEYS[2])
  last = type(last) == 'string' and tonumber(last) or 0
  if last and last >= fence then
    fence = last + 1
  end
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
  return {1, fence}
end
local pttl = redis.call('PTTL', KEYS[1])
local outlive = tonumber(ARGV[4]) or 0
if outlive > 0 then
  redis.call('SET', KEYS[3], '1', 'PX', math.max(pttl, 0) + outlive)
end
return {0, pttl}
