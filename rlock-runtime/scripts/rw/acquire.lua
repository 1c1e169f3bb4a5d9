-- Take a read-write lock as a reader, the upgradeable reader or the writer atomically,
-- issuing the writer's fencing token if asked; queue the caller if it will wait. An
-- upgrade is the writer's call under a token naming its upgradeable reader (`upgrade_of`):
-- it stands first in the queue, and is refused (NOT_HELD) once that reader no longer holds. (After protocol.lua,
-- calls/acquire.lua, state.lua, queue.lua and rw/common.lua.) WAITING.md is the protocol this script
-- keeps.
--
-- Waiters are granted in arrival order (a read-write lock is always fair): a reader does not
-- pass a writer that waits, so writers are not starved, and a release admits every waiter at
-- the queue's head that fits (a writer's release, the readers there together).
-- KEYS: as the lock's   own: a reader's (or the upgradeable reader's): the write token
-- beside which it may read ('' for none), its own guard's write lease (a downgrade); the
-- writer's: ''. (`fair` is ignored:
-- always in arrival order; mode 'm' is not used: Redlock refuses read-write locks.)
-- Returns as the lock's acquire.lua, or {OTHER_KIND, what the key holds}.
local queue, fence_key = KEYS[2], KEYS[3]

-- The fence of a lease granted to this caller.
local function fence(read_only)
  if writing and fenced then
    return issue_fence(fence_key, lease, read_only)
  end
  return 0
end

-- Neither the lock nor a queue exists (the uncontended call): the caller is granted at once,
-- with nothing to purge and nobody to pass. (An upgrade whose reader is gone is refused by
-- the checks below.)
if redis.call('EXISTS', rw, queue) == 0 and not (writing and upgrade_of(token)) then
  creating = true
  take(token, lease, ME)
  return {TAKEN, fence(false)}
end

local found = kind_of(rw)
if found ~= READ_WRITE and found ~= FREE then
  return {OTHER_KIND, found}
end
creating = found == FREE
purge()

-- Handed to this caller by a release before this call came (only a queued caller can be).
local function handed()
  local mine = queued and redis.call('ZSCORE', rw, token)
  if mine then
    return {HANDED, fence(true), math.abs(tonumber(mine)) - now}
  end
end
local given = handed()
if given then
  return given
end

local upgrading = writing and upgrade_of(token)
if upgrading and upgrader() ~= upgrading then
  return {NOT_HELD}
end

-- A downgrade: the writer is the caller's own write guard, beside which it reads.
if not writing and own ~= '' and writer() == own and (ME == 'r' or not upgrader()) then
  take(token, lease, ME)
  return {TAKEN, 0}
end

local waiting = redis.call('LLEN', queue)
if mode ~= 'q' then
  -- Without waiting, a reader does not pass a queued writer either.
  if fits(ME, token) == true and (writing or waiting == 0) then
    take(token, lease, ME)
    return {TAKEN, fence(false)}
  end
  return {BUSY, left()}
end

local mine = entry(token, handoff, fenced and '1' or '0', ME)
if upgrading and fits(ME, token) == true then
  -- An upgrade passes every waiter: none could be granted before it.
  redis.call('LREM', queue, 1, mine)
  take(token, lease, ME)
  return {TAKEN, fence(false)}
end
if waiting > 0 then
  -- Whoever is at the queue's head and fits is granted first, as a release would have
  -- (maybe this caller): the lock came free with nobody told (a lease that ended, a waiter
  -- that left).
  for _ = 1, MOST_ENTRIES do
    if hand_off(rw, queue, fence_key, channel, publish, nil, take, fits) ~= 'handed' then
      break
    end
  end
  given = handed()
  if given then
    return given
  end
  waiting = redis.call('LLEN', queue)
end
if waiting == 0 and fits(ME, token) == true then
  take(token, lease, ME)
  return {TAKEN, fence(false)}
end

-- Busy: the caller stands in the queue (queue.lua's `stand`).
local place = stand(queue, mine, queued, mode_lease, most, upgrading)
if not place then
  return {FULL, left()}
end
return {BUSY, place == 0 and left() or NOT_TOLD}
