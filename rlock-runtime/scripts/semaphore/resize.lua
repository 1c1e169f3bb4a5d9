-- Set a semaphore's count at run time, keeping its holders (`set_permits`, `add_permits`,
-- `clear_permits`). (After protocol.lua, state.lua, queue.lua and semaphore/permits.lua.)
-- The count is kept in the count record, with no expiry (Redisson keeps its `permits` so),
-- and every acquire takes it instead of the count its caller names; the set and its
-- waiters' entries follow it here, and the waiters that now fit are granted at once, in
-- arrival order (a count lowered below the permits in use admits nobody until enough are
-- given back).
-- KEYS: the set, its waiters' queue, its count record
-- ARGV[1]: 'set' (to ARGV[2]), 'add' (ARGV[2], which may be negative, to the count; at
-- least 0) or 'clear' (forget the record: callers' counts apply again)
-- ARGV[3]: the release channel (for PUBLISH its prefix: the key follows)
-- ARGV[4]: 'PUBLISH' or 'SPUBLISH'
-- Returns {0, the count now (for 'clear': the one in use, 0 when none)}; {OTHER_KIND, what
-- the key holds}; {-1} for 'add' with no count set or in use.
local sem, queue, record = KEYS[1], KEYS[2], KEYS[3]
local change, amount, channel, publish = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local found, scores = kind_of(sem)
if found ~= SEMAPHORE and found ~= FREE then
  return {OTHER_KIND, found}
end
local stored = scores and scores[1] and -tonumber(scores[1])
local set_count = tonumber(redis.pcall('GET', record))
if change == 'clear' then
  redis.call('DEL', record)
  if found == FREE and set_count then
    -- Nobody holds, and no count now says which entries carry the count cleared: they go
    -- (their waiters stand again at their next check in, under their own count).
    for _, text in ipairs(redis.call('LRANGE', queue, 0, MOST_ENTRIES - 1)) do
      local _, _, _, kind = entry_of(text)
      if kind == ME .. set_count then
        redis.call('LREM', queue, 1, text)
      end
    end
  end
  return {0, stored or 0}
end
local current = set_count or stored
local permits = amount
if change == 'add' then
  if not current then
    return {-1}
  end
  permits = math.max(current + amount, 0)
end
redis.call('SET', record, string.format('%.0f', permits))
if found == FREE then
  return {0, permits}
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', sem, 0, string.format('%.0f', now))
redis.call('ZADD', sem, 'XX', -permits, PERMITS_MEMBER)
-- The waiters' entries carry the count they wait under: those of the old count now wait
-- under the new one, in their places.
local old, new = ME .. stored, ME .. permits
for i, text in ipairs(redis.call('LRANGE', queue, 0, MOST_ENTRIES - 1)) do
  local owner, lease, fenced, kind = entry_of(text)
  if kind == old then
    redis.call('LSET', queue, i - 1, entry(owner, lease, fenced, new))
  end
end

local function grant(owner, ms)
  give_permits(sem, now, owner, ms)
end

-- The permits a raised count frees go to the waiters in arrival order, as a release's do.
grant_waiters(sem, queue, channel, publish, permits, redis.call('ZCOUNT', sem, 0, '+inf'), new,
  grant)
return {0, permits}
