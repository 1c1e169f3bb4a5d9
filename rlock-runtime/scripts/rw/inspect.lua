-- A read-write lock's writer and readers, and how many wait, in one atomic read (for
-- `LockClient::inspect_read_write`).
-- KEYS[1]: the lock's sorted set   KEYS[2]: its waiters' queue
-- Returns {the writer's token or false, ms left of its lease, or of the reader's lease that
-- ends last when no writer holds (-2 when nobody does), queue length, how many readers hold,
-- {every reader's owner token}}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
-- pcall: a key of another type is no read-write lock.
local readers = redis.pcall('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', now), '+inf',
  'WITHSCORES')
local writer = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%.0f', -now),
  'WITHSCORES', 'LIMIT', 0, 1)
if type(readers) ~= 'table' or type(writer) ~= 'table' then
  return {false, -2, queued, 0, {}}
end
local owners, last = {}, nil
for i = 1, #readers, 2 do
  owners[#owners + 1] = readers[i]
  last = tonumber(readers[i + 1])
end
if writer[1] then
  return {writer[1], -tonumber(writer[2]) - now, queued, #owners, owners}
end
return {false, last and (last - now) or -2, queued, #owners, owners}
