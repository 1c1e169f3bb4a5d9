-- Acquire a lock, and issue its fencing token if asked, atomically; queue the caller if it
-- will wait. (Prepended: queue.lua.) WAITING.md is the protocol this script keeps.
-- KEYS[1]: lock key   KEYS[2]: waiters' queue (Redlock: the awaited mark)
-- KEYS[3]: fence record (all three in the lock's slot)
-- ARGV[1]: owner token   ARGV[2]: lease ms   ARGV[3]: '1' to issue a fence
-- ARGV[4]: how the caller waits: '0' it will not; 'q' in the queue; 'm' Redlock: it marks the
--          key awaited (ARGV[5] ms past the holder's lease) so that releases announce themselves
-- For 'q': ARGV[5]: the queue's lease ms   ARGV[6]: handoff lease ms
--          ARGV[7]: release channel (for PUBLISH its prefix, the lock key follows)
--          ARGV[8]: 'PUBLISH' or 'SPUBLISH'   ARGV[9]: most entries in the queue
--          ARGV[10]: '1' fair (never taken past a live waiter queued earlier)
--          ARGV[11]: '1' queued before: a check in (a release may have handed it the lock)
-- Returns {1, fence or 0} acquired by this call; {2, fence or 0, pttl} handed to this waiter
-- by a release (its announcement is on its way, or was lost); {0, pttl} busy, queued if
-- asked (pttl -3: not read; the queue's head is told the holder's lease on every call, the
-- others are not); {3, pttl} busy and the queue is full: not queued.
--
-- The lock key holds the plain token with a PX expiry, the format redis-py's Lock and the
-- SET NX PX + Lua release recipe use, so other clients locking the same key exclude us.
local lock, queue, fence_key = KEYS[1], KEYS[2], KEYS[3]
local token, lease, fenced, mode = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4]

if mode ~= 'q' then
  if redis.call('SET', lock, token, 'NX', 'PX', lease) then
    return {1, fenced and issue_fence(fence_key, lease) or 0}
  end
  local pttl = redis.call('PTTL', lock)
  if mode == 'm' then
    redis.call('SET', queue, '1', 'PX', math.max(pttl, 0) + tonumber(ARGV[5]))
  end
  return {0, pttl}
end

local entry = token .. ' ' .. ARGV[6] .. ' ' .. (fenced and '1' or '0')
local fair, queued = ARGV[10] == '1', ARGV[11] == '1'

-- The holder, when read: a token, false for a free lock (pcall: a key of another type is
-- someone else's). A newcomer that may barge does not read it: its SET NX tells.
local holder = nil
if queued or fair then
  holder = redis.pcall('GET', lock)
end
-- A fair caller takes a free lock only when no live waiter queued before it; if one did,
-- the lock is free with nobody told (the announcement was lost, or its waiter left), so it
-- is handed to that waiter now (which may be this caller).
if holder == false and fair and hand_off(lock, queue, fence_key, ARGV[7], ARGV[8]) then
  holder = redis.call('GET', lock)
end
if holder == token then
  local fence = 0
  if fenced then
    fence = issue_fence(fence_key, lease, true)
  end
  return {2, fence, redis.call('PTTL', lock)}
end
if not holder and redis.call('SET', lock, token, 'NX', 'PX', lease) then
  if queued then
    redis.call('LREM', queue, 1, entry)
  end
  return {1, fenced and issue_fence(fence_key, lease) or 0}
end

-- Busy. The caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, entry, queued, ARGV[5], ARGV[9])
if not place then
  return {3, redis.call('PTTL', lock)}
end
-- The head times its next look by the holder's lease, told afresh on each of its calls:
-- nobody may release the lock (a holder that died, a client that is not rlock), and a holder
-- that renews moves that time on.
return {0, place == 0 and redis.call('PTTL', lock) or -3}
