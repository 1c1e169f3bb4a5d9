-- A semaphore's grant and fit, shared by its acquire, release and resize scripts (after
-- state.lua and queue.lua; each script's own `take` and `fits` pass its set, count and clock).

-- Gives `owner` its permits of `sem` for `ms` from `now`; the set lives as long as its
-- longest permit. (Scores are written whole: a Lua number as an argument would be rounded
-- to 14 digits.)
local function give_permits(sem, now, owner, ms)
  score_members(sem, string.format('%.0f', now + ms), owner)
  if redis.call('PTTL', sem) < tonumber(ms) then
    redis.call('PEXPIRE', sem, ms)
  end
end

-- Whether `owner`'s hold fits beside the permits of `sem` in use now, under a count of
-- `permits`; DROP for a hold of more permits than the count (lowered at run time under it,
-- and not to 0, which pauses): it never will.
local function permits_fit(sem, permits, owner)
  local want = weight_of(owner)
  if want > permits and permits > 0 then
    return DROP
  end
  return redis.call('ZCOUNT', sem, 0, '+inf') + want <= permits
end
