-- Release a lock only if it is still ours, and announce the release to waiters, if any.
-- KEYS[1]: lock key   KEYS[2]: waiters key (same cluster slot), set by waiting clients
-- ARGV[1]: owner token   ARGV[2]: release channel
-- ARGV[3]: 'SPUBLISH' on Redis Cluster (a sharded channel in the key's slot), else 'PUBLISH'
-- Returns 1 when deleted, 0 when the lock had expired or belongs to another owner.
-- pcall: a key of another type (WRONGTYPE) is not ours, and a refused PUBLISH (an ACL without
-- channel rights) must not turn a done release into an error; scripts are not rolled back.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.pcall(ARGV[3] or 'PUBLISH', ARGV[2], '1')
  end
  return 1
end
return 0
