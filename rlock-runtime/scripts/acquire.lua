-- Acquire a lock, and issue its fencing token if asked, atomically; queue the caller if it
-- will wait. (Prepended: queue.lua.)
-- KEYS[1]: lock key   KEYS[2]: waiters' queue (Redlock: the awaited mark), in the lock's slot;
-- the fence key and this waiter's entry key are derived from it (see queue.lua)
-- ARGV[1]: owner token   ARGV[2]: lease ms   ARGV[3]: '1' to issue a fence
-- ARGV[4]: how the caller waits: '0' it will not; 'q' in the queue; 'm' Redlock: it marks the
--          key awaited (ARGV[5] ms past the holder's lease) so that releases announce themselves
-- For 'q': ARGV[5]: entry lease ms   ARGV[6]: handoff lease ms   ARGV[7]: channel
--          ARGV[8]: 'PUBLISH' or 'SPUBLISH'   ARGV[9]: most entries in the queue
--          ARGV[10]: '1' fair (never taken past a live waiter queued earlier)
--          ARGV[11]: '1' a queued waiter's periodic check   ARGV[12]: '1' queued before
-- Returns {1, fence or 0} acquired by this call; {2, fence or 0, pttl} handed to this waiter
-- by a release (its announcement is on its way, or was lost); {0, pttl} busy, queued if
-- asked (pttl -3: not read); {3, pttl} busy and the queue is full: not queued.
--
-- The lock key holds the plain token with a PX expiry, the format redis-py's Lock and the
-- SET NX PX + Lua release recipe use, so other clients locking the same key exclude us.
local lock, queue = KEYS[1], KEYS[2]
local token, lease, fenced, mode = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4]

if mode ~= 'q' then
  if redis.call('SET', lock, token, 'NX', 'PX', lease) then
    return {1, fenced and issue_fence(queue, lease) or 0}
  end
  local pttl = redis.call('PTTL', lock)
  if mode == 'm' then
    redis.call('SET', queue, '1', 'PX', math.max(pttl, 0) + tonumber(ARGV[5]))
  end
  return {0, pttl}
end

local entry, entry_lease = queue .. ':' .. token, ARGV[5]
local fair, check, queued = ARGV[10] == '1', ARGV[11] == '1', ARGV[12] == '1'

-- The holder, when read: a token, false for a free lock (pcall: a key of another type is
-- someone else's).
local holder = nil
if check then
  -- The cheap path of a waiter's periodic check: its entry (and the queue) live on, and
  -- while another holds the lock there is nothing more to do.
  local kept = redis.call('PEXPIRE', entry, entry_lease)
  redis.call('PEXPIRE', queue, entry_lease)
  holder = redis.pcall('GET', lock)
  if kept == 1 and holder and holder ~= token then
    return {0, -3}
  end
elseif queued or fair then
  holder = redis.pcall('GET', lock)
end
if holder == token then
  local fence = 0
  if fenced then
    fence = issue_fence(queue, lease, true)
  end
  return {2, fence, redis.call('PTTL', lock)}
end

if not holder then
  -- Free, or not read yet. A fair caller takes it only when no live waiter queued before
  -- it; if one did, the lock is free with nobody told (the announcement was lost, or its
  -- waiter left), so it is handed to that waiter now.
  local ahead = false
  if fair then
    for _ = 1, 16 do
      local head = redis.call('ZRANGE', queue, 0, 0)[1]
      if not head or head == token then
        break
      end
      if redis.call('EXISTS', queue .. ':' .. head) == 1 then
        ahead = true
        break
      end
      redis.call('ZREM', queue, head)
    end
  end
  if not ahead then
    if redis.call('SET', lock, token, 'NX', 'PX', lease) then
      if queued or check then
        redis.call('ZREM', queue, token)
        redis.call('DEL', entry)
      end
      return {1, fenced and issue_fence(queue, lease) or 0}
    end
  elseif holder == false then
    hand_off(lock, queue, ARGV[7], ARGV[8])
  end
end

-- Busy: queue this waiter, or keep its place (ZADD NX keeps the arrival of an entry that is
-- still queued; one that lapsed comes back at the end).
local pttl = redis.call('PTTL', lock)
local now = redis.call('TIME')
local arrival = tonumber(now[1]) * 1000000 + tonumber(now[2])
if redis.call('ZADD', queue, 'NX', string.format('%.0f', arrival), token) == 1
    and redis.call('ZCARD', queue) > tonumber(ARGV[9]) then
  redis.call('ZREM', queue, token)
  return {3, pttl}
end
redis.call('SET', entry, ARGV[6] .. ':' .. (fenced and '1' or '0'), 'PX', entry_lease)
redis.call('PEXPIRE', queue, entry_lease)
return {0, pttl}
