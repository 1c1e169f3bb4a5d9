-- The rest of the release (after release.lua and queue.lua): a holder releasing while waiters
-- are queued, or a waiter leaving the queue. Only the queue's releases come here: on Redlock
-- ('m') nobody queues, so nobody leaves, and release.lua answered already.
-- Inherits: from calls/release.lua the arguments `token`, `leaving`, `handoff`,
-- `entry_fenced`, `entry_kind`, `channel` and `publish`; from release.lua `lock`, `queue`,
-- `ours` (nil for a leaving waiter) and `head` (the queue's first entry, popped); from
-- queue.lua `entry` and `hand_off`; from protocol.lua the answers.
local fence_key = KEYS[3]
if leaving then
  redis.call('LREM', queue, 1, entry(token, handoff, entry_fenced, entry_kind))
  ours = redis.pcall('GET', lock) == token
end
if ours then
  local handed = hand_off(lock, queue, fence_key, channel, publish, head)
  if handed == 'fence' then
    return AGAIN_IN_FULL
  end
  if not handed then
    redis.call('DEL', lock)
  end
  return RELEASED
end
if leaving and redis.call('EXISTS', lock) == 0 then
  -- A waiter left while the lock was free and others queue: whoever was to be told of the
  -- last release may have been this one; the next live waiter is handed the lock now.
  if hand_off(lock, queue, fence_key, channel, publish) == 'fence' then
    return AGAIN_IN_FULL
  end
end
return NOT_OURS
