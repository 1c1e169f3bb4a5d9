-- Give a hold's permits back if still ours, handing the free permits to the first live permit
-- waiter queued for the semaphore (named in an announcement); a waiter leaving the queue also
-- gives up its entry. (After protocol.lua, calls/release.lua, state.lua,
-- queue.lua, members/expiry.lua and semaphore/permits.lua.) WAITING.md is the protocol it keeps.
-- Returns RELEASED when the permit was ours (given back or handed on), NOT_OURS when it had
-- ended, was never ours, or the key holds another kind (then nothing of it is touched).
-- (Permits carry no fence, so a release never asks again with the fence record.)
local sem, queue = KEYS[1], KEYS[2]
local found, scores = kind_of(sem, token)
if leaving then
  -- Its entry under the count its caller names, and under the semaphore's and the count set
  -- at run time (KEYS[3], declared when leaving), where a change of the count moved it: a
  -- waiter that gave up leaves no entry a release could grant.
  local counts = {entry_kind}
  if found == SEMAPHORE then
    counts[2] = ME .. -tonumber(scores[1])
  end
  local set_count = tonumber(redis.pcall('GET', KEYS[3]))
  if set_count then
    counts[#counts + 1] = ME .. set_count
  end
  for _, kind in ipairs(counts) do
    redis.call('LREM', queue, 1, entry(token, handoff, entry_fenced, kind))
  end
end
if found ~= SEMAPHORE then
  -- Nothing of ours here: the semaphore ended (its waiters find it free at their next
  -- check in), or the name holds another kind.
  return NOT_OURS
end
local now = now_ms()
-- Ours while its lease lasts: one that ended (not purged yet) was lost: it goes, and what it
-- held is handed on, but the answer is NOT_OURS.
local ours = scores[3] and tonumber(scores[3]) > now
local removed = remove_members(sem, token)
local permits = -tonumber(scores[1])

-- A grant's permits; the set's expiry is written once, below, after every grant, which
-- keep the end of the latest of them.
local latest_grant = nil
local function grant(owner, ms)
  local ends = now + tonumber(ms)
  score_members(sem, string.format('%.0f', ends), owner)
  latest_grant = math.max(latest_grant or 0, ends)
end

-- The free permits go to the next live waiters in arrival order: those this release gave
-- back, and any whose lease ended unreleased. A waiter that wants more permits than are free
-- stops the hand-offs (see permits.lua). (A waiter leaving may have been the one a release
-- told.)
-- Only live permits are counted: permits whose lease ended stay in the set until the next
-- acquire purges them (the set's expiry, its latest end, is theirs only if none is live).
if removed or leaving then
  local in_use = redis.call('ZCOUNT', sem, string.format('(%.0f', now), '+inf')
  grant_waiters(sem, queue, channel, publish, permits, in_use, ME .. permits, grant)
end
-- The set lives until its latest permit ends; the count goes with the last one. Its expiry
-- is that end already (every script keeps it so). A grant that ends no earlier than the
-- permit given back leaves the later of its end and the expiry as the latest end: one
-- PEXPIREAT … GT (7.0 and later) writes it, with no look at the set.
if latest_grant and not (ours and tonumber(scores[3]) > latest_grant)
  and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  redis.call('PEXPIREAT', sem, string.format('%.0f', latest_grant), 'GT')
else
  expire_with_latest(sem, now)
end
return ours and RELEASED or NOT_OURS
