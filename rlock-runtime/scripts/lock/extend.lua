-- Extend a lock's lease only if it is still ours.
-- KEYS[1]: lock key   ARGV[1]: owner token   ARGV[2]: new lease in milliseconds
-- Returns 1 when extended, 0 when the lock had expired, belongs to another owner, or the key
-- holds another kind (pcall: WRONGTYPE is not ours).
local lock, token, lease = KEYS[1], ARGV[1], ARGV[2]
if redis.pcall('GET', lock) == token then
  return redis.call('PEXPIRE', lock, lease)
end
return 0
