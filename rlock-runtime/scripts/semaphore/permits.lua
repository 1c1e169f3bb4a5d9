-- A semaphore's grants, shared by its acquire, release and resize scripts (after state.lua
-- and queue.lua).

-- Gives `owner` its permits of `sem` for `ms` from `now`; the set lives as long as its
-- longest permit (`fresh`: the set did not exist before, and has no expiry yet). (Scores
-- are written whole: a Lua number as an argument would be rounded to 14 digits.)
local function give_permits(sem, now, owner, ms, fresh)
  score_members(sem, string.format('%.0f', now + ms), owner)
  expire_at_least(sem, ms, fresh)
end

-- Grants the waiters in `queue` waiting under `served` (a permit's letter and count) in
-- arrival order while their holds fit beside the `in_use` permits of `permits` (one of more
-- permits than a lowered count, not 0, never will: its entry goes). Dead entries are dropped;
-- a live head that does not fit keeps its place, and stops the grants (the permits it waits
-- for are kept for it: see acquire.lua). `grant(owner, ms)` writes a grant; it stops after
-- granting `me`, when given. Returns the permits in use then, and the lease ms granted to
-- `me` (nil when it was not).
local function grant_waiters(sem, queue, channel, publish, permits, in_use, served, grant, me)
  local mine = nil
  local function fits(_, owner)
    local want = weight_of(owner)
    if want > permits and permits > 0 then
      return DROP
    end
    return in_use + want <= permits
  end
  local function take(owner, ms)
    grant(owner, ms)
    in_use = in_use + weight_of(owner)
    if owner == me then
      mine = tonumber(ms)
    end
  end
  for _ = 1, MOST_ENTRIES do
    if mine or in_use >= permits
      or hand_off(sem, queue, nil, channel, publish, nil, take, fits, served) ~= 'handed' then
      break
    end
  end
  return in_use, mine
end
