-- What a key holds, and Redis's clock: read by every script but a lock's common release,
-- which returns before these are defined (each definition costs every call that reaches it
-- a closure). (After protocol.lua.)

-- Redis's clock in milliseconds: every lease held in a sorted set ends by it.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- What `key` holds (FREE, LOCK, SEMAPHORE, READ_WRITE or FOREIGN: data rlock did not write),
-- and, for a sorted set of rlock's, the scores of its count, its mark and then of each of
-- `...` (false where absent), read in one command.
local function kind_of(key, ...)
  local scores = redis.pcall('ZMSCORE', key, PERMITS_MEMBER, READ_WRITE_MEMBER, ...)
  if scores['err'] then
    if redis.call('TYPE', key)['ok'] == 'string' then
      return LOCK
    end
    return FOREIGN
  end
  if scores[1] then
    return SEMAPHORE, scores
  end
  if scores[2] then
    return READ_WRITE, scores
  end
  if redis.call('EXISTS', key) == 0 then
    return FREE, scores
  end
  return FOREIGN
end
