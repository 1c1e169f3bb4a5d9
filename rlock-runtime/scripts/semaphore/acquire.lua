-- Take a permit of a semaphore atomically; queue the caller if it will wait. (After
-- protocol.lua, calls/acquire.lua, state.lua, queue.lua and semaphore/permits.lua.) WAITING.md is the protocol
-- this script keeps.
--
-- A semaphore is one sorted set: each permit in use is a member scored by the end of its
-- holder's lease (ms, Redis's clock): the holder's token, and for a hold of n permits n - 1
-- more (state.lua's `members_of`), so the set's positive members count the permits in use;
-- PERMITS_MEMBER is scored by minus the permit count, so the count lives and ends with the
-- permits, every caller must name the same one, and the set is told from any other by it.
-- A count set at run time (`set_permits`, kept in the count record) is the count instead,
-- whatever the caller names: the set follows it. A
-- permit whose lease ended is removed by the next call that looks, which frees it: a crashed
-- holder's permits come back at their own lease's end.
--
-- Waiting is in arrival order for a hold of several permits (as tokio's semaphore): while
-- another caller's hold of several permits heads the queue, the permits it waits for are
-- kept for it, and nobody arriving later takes them (a stream of single permits never
-- starves it). A caller of one permit may otherwise take a free one past the queue, unless
-- it is `fair`.
-- KEYS: the set, its waiters' queue, and its count record (the count set at run time, if any)
-- own: the permit count the caller names. (The fence flag is ignored; mode 'm' is not used: Redlock refuses
-- semaphores.)
-- Returns as the lock's acquire.lua (with the earliest permit's remaining lease for pttl, and
-- RECOUNTED for a waiter behind others under a count set at run time), or
-- {OTHER_COUNT, stored count}, or {OTHER_KIND, what the key holds}.
local sem, queue = KEYS[1], KEYS[2]
local want = weight_of(token)

local found, scores = kind_of(sem, token)
if found ~= SEMAPHORE and found ~= FREE then
  return {OTHER_KIND, found}
end
-- The count: the caller's when the set stores it. Otherwise (a new set, or another count
-- stored) the count record's when there is one: a count set at run time is written to the
-- set with the record (resize.lua), so a set that stores the caller's count follows the
-- record already.
local stored = found == SEMAPHORE and -tonumber(scores[1])
local permits = tonumber(own)
if stored ~= permits then
  -- pcall: a record of another type (not rlock's) counts as no count set.
  local set_count = tonumber(redis.pcall('GET', KEYS[3]))
  permits = set_count or permits
  if stored and stored ~= permits then
    if not set_count then
      return {OTHER_COUNT, stored}
    end
    redis.call('ZADD', sem, 'XX', -permits, PERMITS_MEMBER)
  end
end
-- More permits than a count set at run time: never granted while it lasts (a count of 0
-- pauses the semaphore instead: its callers wait for it to be raised).
if want > permits and permits > 0 then
  return {OTHER_COUNT, permits}
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', sem, 0, string.format('%.0f', now))

-- Whether the set does not exist yet: the first grant creates it, with no expiry to keep.
local creating = found == FREE

-- Grants `owner` its permits for `ms`; the set lives as long as its longest permit (see
-- permits.lua).
local function take(owner, ms)
  redis.call('ZADD', sem, -permits, PERMITS_MEMBER)
  give_permits(sem, now, owner, ms, creating)
  creating = false
end

-- The permits kept for the queue's head: another caller's hold of several permits waiting
-- there (0 when there is none, or the head is this caller or wants one permit, or more than
-- the count: that hold never fits, and a release drops it).
local function kept()
  local head = redis.call('LINDEX', queue, 0)
  local owner = head and entry_of(head)
  if not owner or owner == token or weight_of(owner) == 1 or weight_of(owner) > permits
    then
    return 0
  end
  return weight_of(owner)
end

-- What is left of the earliest-ending permit's lease: when the next one may come free.
local function earliest_left()
  local first = redis.call('ZRANGEBYSCORE', sem, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then
    return tonumber(first[2]) - now
  end
  return -2
end

-- A permit a release handed this waiter, read with the kind; one whose lease ended is none.
if scores and scores[3] and tonumber(scores[3]) > now then
  return {HANDED, 0, tonumber(scores[3]) - now}
end
-- Its entry carries the count: a release serves only waiters of its own count.
local served = ME .. permits
local in_use = redis.call('ZCOUNT', sem, 0, '+inf')
local keep = 0
if in_use < permits then
  keep = kept()
end
-- A waiting caller with a permit free serves the queue first when it is fair, or when a hold
-- of several permits heads it: dead entries are dropped, and live ones granted in order
-- while they fit (one of them may be this caller); a head that does not fit keeps its
-- permits.
if mode == 'q' and in_use < permits and (fair or keep > 0) then
  local granted
  in_use, granted = grant_waiters(sem, queue, channel, publish, permits, in_use, served, take,
    token)
  if granted then
    return {HANDED, 0, granted}
  end
  keep = kept()
end
local free = in_use + want + keep <= permits
if mode ~= 'q' then
  if free then
    take(token, lease)
    return {TAKEN, 0}
  end
  return {BUSY, earliest_left()}
end

local mine = entry(token, handoff, '0', served)
if free then
  take(token, lease)
  if queued then
    redis.call('LREM', queue, 1, mine)
  end
  return {TAKEN, 0}
end

-- Busy: the caller stands in the queue (queue.lua's `stand`). Behind others, under a count
-- set at run time, it is answered RECOUNTED: its client's next waiter comes through this
-- script, which writes its entry under that count, and not by a plain join.
local place = stand(queue, mine, queued, mode_lease, most)
if not place then
  return {FULL, earliest_left()}
end
if place == 0 then
  return {BUSY, earliest_left()}
end
return {BUSY, permits == tonumber(own) and NOT_TOLD or RECOUNTED}
