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

-- How many permits a semaphore's hold of `owner` takes: its token ends in '*n' when more
-- than one (`permits(n)`), at most MOST_TAKEN.
local function weight_of(owner)
  return math.min(tonumber(string.match(owner, '%*(%d+)$')) or 1, MOST_TAKEN)
end

-- The members a lease of `owner` occupies in its sorted set, all scored alike: its token,
-- and for a semaphore's hold of n permits '<token>/2' to '<token>/n' besides, so that
-- counting the set's members counts permits in use.
local function members_of(owner)
  local members = {owner}
  if ME == 'p' then
    local n = weight_of(owner)
    for i = 2, MOST_TAKEN do
      if i > n then
        break
      end
      members[i] = owner .. '/' .. i
    end
  end
  return members
end

-- Scores every member of `owner`'s lease in `set` by `score` (with `xx`, only those there).
local function score_members(set, score, owner, xx)
  local args = {}
  for _, member in ipairs(members_of(owner)) do
    args[#args + 1] = score
    args[#args + 1] = member
  end
  if xx then
    redis.call('ZADD', set, 'XX', unpack(args))
  else
    redis.call('ZADD', set, unpack(args))
  end
end

-- Removes every member of `owner`'s lease from `set`; whether it was there.
local function remove_members(set, owner)
  return redis.call('ZREM', set, unpack(members_of(owner))) > 0
end

-- Keeps `set` alive for at least `ms` more: PEXPIRE's GT flag where the server has it (every
-- script that creates a set of leases gives it an expiry), else PTTL then PEXPIRE. A `fresh`
-- set, created by this call, has no expiry yet: it is given one.
local function expire_at_least(set, ms, fresh)
  if fresh then
    redis.call('PEXPIRE', set, ms)
  elseif (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    redis.call('PEXPIRE', set, ms, 'GT')
  elseif redis.call('PTTL', set) < tonumber(ms) then
    redis.call('PEXPIRE', set, ms)
  end
end
