-- The permit of a semaphore that ends first, and what is left of its lease, in one atomic
-- read. KEYS[1]: semaphore key
-- Returns {token or false, ms left (-2 when no permit is in use)}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- pcall: a key of another type is no semaphore.
local first = redis.pcall('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', now), '+inf',
  'WITHSCORES', 'LIMIT', 0, 1)
if type(first) ~= 'table' or not first[1] then
  return {false, -2}
end
return {first[1], tonumber(first[2]) - now}
