-- A semaphore's permits in use, the one that ends first, and how many wait, in one atomic
-- read (for `LockClient::inspect_semaphore`).
-- KEYS[1]: semaphore key   KEYS[2]: its waiters' queue
-- Returns {first token or false, ms left of its lease (-2 when no permit is in use), queue
-- length, the stored count (0 when no permit is in use), {every permit's owner token}}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
-- pcall: a key of another type is no semaphore.
local permits = redis.pcall('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', now), '+inf',
  'WITHSCORES')
if type(permits) ~= 'table' or not permits[1] then
  return {false, -2, queued, 0, {}}
end
local count = tonumber(redis.call('ZSCORE', KEYS[1], '#permits') or 0)
local owners = {}
for i = 1, #permits, 2 do
  owners[#owners + 1] = permits[i]
end
return {permits[1], tonumber(permits[2]) - now, queued, -count, owners}
