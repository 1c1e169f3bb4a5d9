-- A semaphore's permits in use, the one that ends first, and how many wait, in one atomic
-- read (for `LockClient::inspect_semaphore`).
-- KEYS[1]: semaphore key   KEYS[2]: its waiters' queue
-- Returns {what the key holds, the token of the hold whose permits end first or false, ms left of its lease (-2
-- when no permit is in use), queue length, the stored count (0 when no permit is in use),
-- {every hold's owner token}}. A key of another kind is not read.
local now = now_ms()
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
local found, scores = kind_of(KEYS[1])
if found ~= SEMAPHORE then
  return {found, false, -2, queued, 0, {}}
end
local permits = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', now), '+inf',
  'WITHSCORES')
if not permits[1] then
  return {found, false, -2, queued, 0, {}}
end
-- A hold of several permits is listed once, by its token (its other members name it with
-- '/<n>' after it, which no token has).
local owners = {}
for i = 1, #permits, 2 do
  if not string.find(permits[i], '/', 1, true) then
    owners[#owners + 1] = permits[i]
  end
end
return {found, owners[1], tonumber(permits[2]) - now, queued, -tonumber(scores[1]), owners}
