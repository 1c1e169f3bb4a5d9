-- Give a reader's or the writer's lease of a read-write lock back if it is still ours, and
-- admit every waiter at the queue's head that now fits, in arrival order: after a writer,
-- the readers there together (up to the first writer); after the last reader, the writer
-- there. A waiter leaving the queue also gives up its entry. (Prepended: queue.lua, then
-- rw/common.lua.) WAITING.md is the protocol it keeps.
-- KEYS[1]: the lock's sorted set   KEYS[2]: waiters' queue   KEYS[3]: fence record (always
--          declared: a writer admitted may want a fence)
-- ARGV: as the lock's release.lua
-- Returns 1 when the lease was ours (given back or handed on), 0 when it had ended or was
-- never ours.
local queue, fence_key, token, leaving = KEYS[2], KEYS[3], ARGV[1], ARGV[4] == '1'
local channel, publish = ARGV[3], 'SPUBLISH'
if channel == nil or channel == '' then
  channel, publish = 'rlock:released:', 'PUBLISH'
end
if leaving then
  redis.call('LREM', queue, 1,
    token .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. (writing and 'w' or 'r'))
end
-- pcall: a key of another type holds no lease of ours.
local removed = redis.pcall('ZREM', rw, token)
if type(removed) ~= 'number' then
  return 0
end
local ours = removed == 1
-- Only a waiter can be admitted: with none queued, the ended leases are left to the next
-- acquire's purge and to the set's expiry. (On a lock that is gone, a leaving waiter still
-- hands it to the next live one: it may have been the one a release told.)
if (ours or leaving) and redis.call('LLEN', queue) > 0 then
  purge()
  while hand_off(rw, queue, fence_key, channel, publish, nil, take, fits) == 'handed' do
  end
end
if redis.call('ZCARD', rw) == 0 then
  redis.call('DEL', rw)
end
return ours and 1 or 0
