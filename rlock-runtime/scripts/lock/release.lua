-- Release a lock only if it is still ours, handing it to the first live waiter queued for it
-- (named in an announcement), if any; a waiter leaving the queue also gives up its entry.
-- (Followed by queue.lua, then release_queued.lua.) WAITING.md is the protocol it keeps.
-- KEYS[1]: lock key   KEYS[2]: waiters' queue (Redlock: the awaited mark)
-- KEYS[3]: fence record, when declared (all three in the lock's slot)
-- ARGV[1]: owner token
-- ARGV[2]: 'q' waiters queue (the default when absent); 'm' Redlock: announce ("1") to every
--          waiter while the mark lives
-- ARGV[3]: on Redis Cluster, the lock's sharded release channel (SPUBLISH); absent or empty
--          on one server: PUBLISH on 'rlock:released:' followed by the lock key
-- ARGV[4]: '1' when the caller leaves the queue (a waiter giving up); its entry's handoff
--          lease ms and fence flag are ARGV[5] and ARGV[6]
-- Returns 1 when the lock was ours (deleted or handed on), 0 when it had expired or belongs
-- to another owner, -1 when nothing was done: the next waiter wants a fence, and the call
-- must come again with the fence record declared (a release declares it only then, so that
-- the common release pays for two keys, not three).
-- pcall: a key of another type (WRONGTYPE) is not ours, and a refused PUBLISH (an ACL without
-- channel rights) must not turn a done release into an error; scripts are not rolled back.
--
-- The common case comes first, before queue.lua's functions are defined (each definition
-- costs every call that reaches it a closure) and before any argument it does not need is
-- read: a holder releasing with nobody queued. A queue's first entry, popped here, goes on
-- to the hand-off.
local lock, queue, token, leaving = KEYS[1], KEYS[2], ARGV[1], ARGV[4] == '1'
local ours, head = nil, nil
if not leaving then
  ours = redis.pcall('GET', lock) == token
  if not ours then
    return 0
  end
  if ARGV[2] == 'm' then
    redis.call('DEL', lock)
    if redis.call('EXISTS', queue) == 1 then
      local channel = ARGV[3]
      if channel == nil or channel == '' then
        redis.pcall('PUBLISH', 'rlock:released:' .. lock, '1')
      else
        redis.pcall('SPUBLISH', channel, '1')
      end
    end
    return 1
  end
  -- pcall: a queue key of another type is no queue of ours.
  head = redis.pcall('LPOP', queue)
  if type(head) ~= 'string' then
    redis.call('DEL', lock)
    return 1
  end
end
local channel, publish = ARGV[3], 'SPUBLISH'
if channel == nil or channel == '' then
  channel, publish = 'rlock:released:', 'PUBLISH'
end
