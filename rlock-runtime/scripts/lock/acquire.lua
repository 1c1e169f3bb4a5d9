-- Acquire a lock, and issue its fencing token if asked, atomically; queue the caller if it
-- will wait. (After protocol.lua, calls/acquire.lua, state.lua and
-- queue.lua.) WAITING.md is the
-- protocol this script keeps.
-- Returns as protocol.lua's acquire answers: {TAKEN, fence or 0}; {HANDED, fence or 0, pttl};
-- {BUSY, pttl}, queued if asked (pttl NOT_TOLD: not read; the queue's head is told the
-- holder's lease on every call, the others are not); {FULL, pttl}; {OTHER_KIND, what the key holds}.
--
-- The lock key holds the plain token with a PX expiry, the format redis-py's Lock and the
-- SET NX PX + Lua release recipe use, so other clients locking the same key exclude us: a
-- string under the key is a lock, whoever wrote it.
local lock, queue, fence_key = KEYS[1], KEYS[2], KEYS[3]

-- The answer to a caller that finds the key taken: busy, or another kind's.
local function taken()
  local found = kind_of(lock)
  if found ~= LOCK then
    return {OTHER_KIND, found}
  end
end

if mode ~= 'q' then
  if redis.call('SET', lock, token, 'NX', 'PX', lease) then
    return {TAKEN, fenced and issue_fence(fence_key, lease) or 0}
  end
  local refused = taken()
  if refused then
    return refused
  end
  local pttl = redis.call('PTTL', lock)
  if mode == 'm' then
    redis.call('SET', queue, '1', 'PX', math.max(pttl, 0) + tonumber(mode_lease))
  end
  return {BUSY, pttl}
end

local mine = entry(token, handoff, fenced and '1' or '0', ME)

-- The holder, when read: a token, false for a free lock. A newcomer that may barge does not
-- read it: its SET NX tells.
local holder = nil
if queued or fair then
  holder = redis.pcall('GET', lock)
  if type(holder) == 'table' then
    return taken()
  end
end
-- A fair caller takes a free lock only when no live waiter queued before it; if one did,
-- the lock is free with nobody told (the announcement was lost, or its waiter left), so it
-- is handed to that waiter now (which may be this caller).
if holder == false and fair and hand_off(lock, queue, fence_key, channel, publish) then
  holder = redis.call('GET', lock)
end
if holder == token then
  local fence = 0
  if fenced then
    fence = issue_fence(fence_key, lease, true)
  end
  return {HANDED, fence, redis.call('PTTL', lock)}
end
if not holder then
  if redis.call('SET', lock, token, 'NX', 'PX', lease) then
    if queued then
      redis.call('LREM', queue, 1, mine)
    end
    return {TAKEN, fenced and issue_fence(fence_key, lease) or 0}
  end
  local refused = taken()
  if refused then
    return refused
  end
end

-- Busy. The caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, mine, queued, mode_lease, most)
if not place then
  return {FULL, redis.call('PTTL', lock)}
end
-- The head times its next look by the holder's lease, told afresh on each of its calls:
-- nobody may release the lock (a holder that died, a client that is not rlock), and a holder
-- that renews moves that time on.
return {BUSY, place == 0 and redis.call('PTTL', lock) or NOT_TOLD}
