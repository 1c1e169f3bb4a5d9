-- Release a lock only if it is still ours, handing it to the first live waiter queued for it
-- (named in an announcement), if any; a waiter leaving the queue also gives up its entry.
-- (Prepended: queue.lua.)
-- KEYS[1]: lock key   KEYS[2]: waiters' queue (Redlock: the awaited mark), in the lock's slot;
-- the fence key is derived from it (see queue.lua)
-- ARGV[1]: owner token   ARGV[2]: release channel (for PUBLISH its prefix, the lock key
-- follows)   ARGV[3]: 'PUBLISH' or 'SPUBLISH'
-- ARGV[4]: 'q' waiters queue; 'm' Redlock: announce ("1") to every waiter while the mark lives
-- ARGV[5]: '1' when the caller leaves the queue (a waiter giving up); its entry's handoff
-- lease ms and fence flag are ARGV[6] and ARGV[7]
-- Returns 1 when the lock was ours (deleted or handed on), 0 when it had expired or belongs
-- to another owner.
-- pcall: a key of another type (WRONGTYPE) is not ours, and a refused PUBLISH (an ACL without
-- channel rights) must not turn a done release into an error; scripts are not rolled back.
local lock, queue = KEYS[1], KEYS[2]
local token, channel, publish = ARGV[1], ARGV[2], ARGV[3]
if ARGV[5] == '1' then
  redis.call('LREM', queue, 1, token .. ' ' .. ARGV[6] .. ' ' .. ARGV[7])
end
if redis.pcall('GET', lock) == token then
  if ARGV[4] == 'q' then
    if not hand_off(lock, queue, channel, publish) then
      redis.call('DEL', lock)
    end
  else
    redis.call('DEL', lock)
    if redis.call('EXISTS', queue) == 1 then
      redis.pcall(publish, publish == 'PUBLISH' and channel .. lock or channel, '1')
    end
  end
  return 1
end
if ARGV[5] == '1' and ARGV[4] == 'q' and redis.call('EXISTS', lock) == 0 then
  -- A waiter left while the lock was free and others queue: whoever was to be told of the
  -- last release may have been this one; the next live waiter is handed the lock now.
  hand_off(lock, queue, channel, publish)
end
return 0
