-- Extend a lock's lease only if it is still ours.
-- KEYS[1]: lock key   ARGV[1]: owner token   ARGV[2]: new lease in milliseconds
-- Returns 1 when extended, 0 when the lock had expired, belongs to another owner, or the key
-- holds another kind (pcall: WRONGTYPE is not ours).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
