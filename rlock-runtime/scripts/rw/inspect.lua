-- A read-write lock's writer and readers, and how many wait, in one atomic read (for
-- `LockClient::inspect_read_write`).
-- KEYS[1]: the lock's sorted set   KEYS[2]: its waiters' queue
-- Returns {what the key holds, the writer's token or false, ms left of its lease, or of the
-- reader's lease that ends last when no writer holds (-2 when nobody does), queue length, how
-- many readers hold, {the owner tokens of the upgradeable reader, written as UPGRADER_MARK ..
-- its token, then of the first MOST_LISTED other readers}, 0}. A key of another kind is not
-- read.
local now = now_ms()
local queued = redis.pcall('LLEN', KEYS[2])
if type(queued) ~= 'number' then
  queued = 0
end
local found = kind_of(KEYS[1])
if found ~= READ_WRITE then
  return {found, false, -2, queued, 0, {}, 0}
end
local live = string.format('(%.0f', now)
local readers = redis.call('ZCOUNT', KEYS[1], live, '+inf')
local last = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', live, 'WITHSCORES', 'LIMIT', 0, 1)
local writer = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%.0f', -now),
  'WITHSCORES', 'LIMIT', 0, 1)
local owners, upgrader = {}, nil
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], 0, 0, 'LIMIT', 0, 3)) do
  if string.sub(member, 1, #UPGRADER_MARK) == UPGRADER_MARK then
    local token = string.sub(member, #UPGRADER_MARK + 1)
    local ends = redis.call('ZSCORE', KEYS[1], token)
    if ends and tonumber(ends) > now then
      upgrader = token
      owners[1] = member
    end
  end
end
for _, reader in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'LIMIT', 0,
    MOST_LISTED)) do
  if reader ~= upgrader then
    owners[#owners + 1] = reader
  end
end
if writer[1] then
  return {found, writer[1], -tonumber(writer[2]) - now, queued, readers, owners, 0}
end
return {found, false, last[2] and (tonumber(last[2]) - now) or -2, queued, readers, owners, 0}
