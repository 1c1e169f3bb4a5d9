-- The rest of the release (after release.lua and queue.lua): a holder releasing while waiters
-- are queued, or a waiter leaving the queue. Only the queue's releases come here: on Redlock
-- ('m') nobody queues, so nobody leaves, and release.lua answered already.
if leaving then
  redis.call('LREM', queue, 1, token .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
  ours = redis.pcall('GET', lock) == token
end
if ours then
  if not hand_off(lock, queue, channel, publish, head) then
    redis.call('DEL', lock)
  end
  return 1
end
if leaving and redis.call('EXISTS', lock) == 0 then
  -- A waiter left while the lock was free and others queue: whoever was to be told of the
  -- last release may have been this one; the next live waiter is handed the lock now.
  hand_off(lock, queue, channel, publish)
end
return 0
