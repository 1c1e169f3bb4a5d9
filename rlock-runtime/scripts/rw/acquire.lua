-- Take a read-write lock as a reader or as the writer atomically, issuing the writer's
-- fencing token if asked; queue the caller if it will wait. (Prepended: queue.lua, then
-- rw/common.lua.) WAITING.md is the protocol this script keeps.
--
-- Waiters are granted in arrival order (a read-write lock is always fair): a reader does not
-- pass a writer that waits, so writers are not starved, and a release admits every waiter at
-- the queue's head that fits (a writer's release, the readers there together).
-- KEYS[1]: the lock's sorted set   KEYS[2]: waiters' queue   KEYS[3]: fence record
-- ARGV[1..11]: as the lock's acquire.lua (mode 'm' is not used: Redlock refuses read-write
--          locks; ARGV[10], fair, is ignored: always in arrival order)
-- ARGV[#ARGV]: a reader's: the writer's token it may read beside ('' for none), this task's
--          own write lease (a downgrade); the writer's: unused
-- Returns as the lock's acquire.lua, or {5} when the key holds something else.
local queue, fence_key = KEYS[2], KEYS[3]
local token, lease, fenced, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4]
local role, queued = writing and 'w' or 'r', ARGV[11] == '1'

-- pcall: a key of another type, or a semaphore's set (it holds its count), is no read-write
-- lock.
if redis.pcall('ZSCORE', rw, '#permits') then
  return {5}
end
purge()

-- The fence of a lease granted to this caller.
local function fence(read_only)
  if writing and fenced then
    return issue_fence(fence_key, lease, read_only)
  end
  return 0
end

-- Handed to this caller by a release before this call came (only a queued caller can be).
local function handed()
  local mine = queued and redis.call('ZSCORE', rw, token)
  if mine then
    return {2, fence(true), math.abs(tonumber(mine)) - now}
  end
end
local mine = handed()
if mine then
  return mine
end

-- A downgrade: the writer is this caller's own task, which reads beside it.
local beside = ARGV[#ARGV]
if not writing and beside ~= '' and writer() == beside then
  take(token, lease, 'r')
  return {1, 0}
end

local waiting = redis.call('LLEN', queue)
if mode ~= 'q' then
  -- Without waiting, a reader does not pass a queued writer either.
  if fits(role) and (writing or waiting == 0) then
    take(token, lease, role)
    return {1, fence(false)}
  end
  return {0, left()}
end

local entry = token .. ' ' .. ARGV[6] .. ' ' .. (fenced and '1' or '0') .. ' ' .. role
if waiting > 0 then
  -- Whoever is at the queue's head and fits is granted first, as a release would have
  -- (maybe this caller): the lock came free with nobody told (a lease that ended, a waiter
  -- that left).
  while hand_off(rw, queue, fence_key, ARGV[7], ARGV[8], nil, take, fits) == 'handed' do
  end
  mine = handed()
  if mine then
    return mine
  end
  waiting = redis.call('LLEN', queue)
end
if waiting == 0 and fits(role) then
  take(token, lease, role)
  return {1, fence(false)}
end

-- Busy: the caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, entry, queued, ARGV[5], ARGV[9])
if not place then
  return {3, left()}
end
return {0, place == 0 and left() or -3}
