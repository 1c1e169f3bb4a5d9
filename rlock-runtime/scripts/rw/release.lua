-- Give a reader's or the writer's lease of a read-write lock back if it is still ours, and
-- admit every waiter at the queue's head that now fits, in arrival order: after a writer,
-- the readers there together (up to the first writer); after the last reader, the writer
-- there. A waiter leaving the queue also gives up its entry. (After protocol.lua,
-- calls/release.lua, state.lua, queue.lua, members/expiry.lua and rw/common.lua.) WAITING.md is the
-- protocol it keeps.
-- KEYS: as the lock's, the fence record always declared (a writer admitted may want a fence)
-- Returns RELEASED when the lease was ours (given back or handed on), NOT_OURS when it had
-- ended, was never ours, or the key holds another kind (then nothing of it is touched).
local queue, fence_key = KEYS[2], KEYS[3]
if leaving then
  redis.call('LREM', queue, 1, entry(token, handoff, entry_fenced, entry_kind))
end
local found, scores = kind_of(rw, token)
if found ~= READ_WRITE and found ~= FREE then
  return NOT_OURS
end
-- A waiter leaving a lock that is gone may hand it on, creating the set anew.
creating = found == FREE
-- Ours while its lease lasts (a writer's is scored by minus its end): one that ended (not
-- purged yet) was lost: it goes, and what it
-- held is handed on, but the answer is NOT_OURS.
local ends = scores[3] and tonumber(scores[3])
local ours = ends and (writing and -ends or ends) > now
local removed = redis.call('ZREM', rw, token) == 1
if ME == 'u' then
  redis.call('ZREM', rw, UPGRADER_MARK .. token)
end
-- Only a waiter can be admitted: with none queued, the ended leases are left to the next
-- acquire's purge and to the set's expiry. (On a lock that is gone, a leaving waiter still
-- hands it to the next live one: it may have been the one a release told.)
local waiting = (removed or leaving) and redis.call('LLEN', queue) > 0
if waiting then
  purge()
  for _ = 1, MOST_ENTRIES do
    if hand_off(rw, queue, fence_key, channel, publish, nil, take, fits) ~= 'handed' then
      break
    end
  end
end
-- The set lives until its latest lease ends, and goes with the last one: at once when
-- nobody was admitted and its mark is all that is left (the last holder's release).
if not waiting and redis.call('ZCARD', rw) <= 1 then
  redis.call('DEL', rw)
else
  expire_with_latest(rw, now)
end
return ours and RELEASED or NOT_OURS
