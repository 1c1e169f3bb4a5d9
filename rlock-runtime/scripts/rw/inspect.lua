-- A read-write lock's writer and readers, and how many wait, in one atomic read (for
-- `LockClient::inspect_read_write`).
-- KEYS[1]: the lock's sorted set   KEYS[2]: its waiters' queue
-- Returns {what the key holds, the writer's token or false, ms left of its lease, or of the
-- reader's lease that ends last when no writer holds (-2 when nobody does), queue length, how
-- many readers hold, {every reader's owner token}}, the upgradeable reader's written as
-- UPGRADER_MARK .. its token. A key of another kind is not read.
local now = now_ms()
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
local found = kind_of(KEYS[1])
if found ~= READ_WRITE then
  return {found, false, -2, queued, 0, {}}
end
local readers = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', now), '+inf',
  'WITHSCORES')
local writer = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%.0f', -now),
  'WITHSCORES', 'LIMIT', 0, 1)
local upgrader = nil
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], 0, 0, 'LIMIT', 0, 3)) do
  if string.sub(member, 1, #UPGRADER_MARK) == UPGRADER_MARK then
    upgrader = string.sub(member, #UPGRADER_MARK + 1)
  end
end
local owners, last = {}, nil
for i = 1, #readers, 2 do
  if readers[i] == upgrader then
    owners[#owners + 1] = UPGRADER_MARK .. readers[i]
  else
    owners[#owners + 1] = readers[i]
  end
  last = tonumber(readers[i + 1])
end
if writer[1] then
  return {found, writer[1], -tonumber(writer[2]) - now, queued, #owners, owners}
end
return {found, false, last and (last - now) or -2, queued, #owners, owners}
