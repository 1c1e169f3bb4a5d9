-- Extend a lock's lease only if it is still ours; with a successor, it becomes the owner in
-- our place (a hold taken over by another client).
-- KEYS[1]: lock key   ARGV[1]: owner token   ARGV[2]: new lease in milliseconds
-- ARGV[3]: the successor's owner token, or absent
-- Returns 1 when extended, 0 when the lock had expired, belongs to another owner, or the key
-- holds another kind (pcall: WRONGTYPE is not ours).
local lock, token, lease, successor = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if redis.pcall('GET', lock) == token then
  if successor then
    redis.call('SET', lock, successor, 'PX', lease)
    return 1
  end
  return redis.call('PEXPIRE', lock, lease)
end
return 0
