-- A semaphore's permits in use, the one that ends first, and how many wait, in one atomic
-- read (for `LockClient::inspect_semaphore`).
-- KEYS[1]: semaphore key   KEYS[2]: its waiters' queue   KEYS[3]: its count record
-- Returns {what the key holds, the token of the hold whose permits end first or false, ms
-- left of its lease (-2 when no permit is in use), queue length, its count (the one set at
-- run time, else the one stored with the permits; 0 when neither is), {the owner tokens of the holds of the first MOST_LISTED permits, in the
-- order they end}, the permits in use}. A key of another kind is not read.
local now = now_ms()
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
local found, scores = kind_of(KEYS[1])
-- pcall: a record of another type (not rlock's) counts as no count set.
local set_count = tonumber(redis.pcall('GET', KEYS[3]))
if found == FREE and set_count then
  return {SEMAPHORE, false, -2, queued, set_count, {}, 0}
end
if found ~= SEMAPHORE then
  return {found, false, -2, queued, 0, {}, 0}
end
local live = string.format('(%.0f', now)
-- Every permit is a member, a hold of several one per permit: counting members counts permits.
local in_use = redis.call('ZCOUNT', KEYS[1], live, '+inf')
local first = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if not first[1] then
  return {found, false, -2, queued, set_count or 0, {}, 0}
end
-- A hold of several permits is listed once, by its token (its other members name it with
-- '/<n>' after it, which no token has).
local owners = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'LIMIT', 0,
    MOST_LISTED)) do
  if not string.find(member, '/', 1, true) then
    owners[#owners + 1] = member
  end
end
local holder = string.match(first[1], '^([^/]*)')
return {found, holder, tonumber(first[2]) - now, queued, set_count or -tonumber(scores[1]),
  owners, in_use}
