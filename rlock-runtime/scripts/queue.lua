-- Shared by the acquire and release scripts (prepended to the one, in the middle of the
-- other): the waiters' queue of a lock.
--
-- A lock's queue is a list `queue` in the lock's cluster slot, in arrival order. Each entry is
-- "<owner token> <handoff lease ms> <1 if fenced, else 0>": whom to grant the lock, and how.
-- An entry counts while its client listens: a release names the waiter it hands the lock to
-- on the channel of that waiter's client for this lock (the client is the token up to its
-- first ':'), and an announcement nobody received (`PUBLISH` answers 0: the client's process
-- died, or its subscription is not confirmed yet) skips the entry. So a dead waiter costs
-- nothing, and joining the queue costs one RPUSH.

-- The companion keys of a lock are derived from its queue's key `<base>:waiters` (or, on
-- Redlock, `<base>:awaited`): the fence record `<base>:fence` (see `issue_fence`). Both share
-- the lock's hash tag, so they are in its cluster slot. (Only three functions are defined
-- here: each one costs every call of the script a closure, whether it runs or not.)

-- A new fencing token for the lock of `queue` (or, with `read_only`, the current one),
-- above every earlier one: max(last + 1, server time in microseconds). The record expires
-- with the lease, so no per-key record outlives its lock; once it is gone, the server clock
-- (which moved on by at least the lease) keeps the next fence above every earlier one.
local function issue_fence(queue, lease, read_only)
  local fence_key = (string.match(queue, '^(.*):[^:]*$') or queue) .. ':fence'
  if read_only then
    return tonumber(redis.pcall('GET', fence_key)) or 0
  end
  local now = redis.call('TIME')
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  -- pcall: a fence key of another type (WRONGTYPE) counts as no record; it is replaced.
  local last = redis.pcall('GET', fence_key)
  last = type(last) == 'string' and tonumber(last) or 0
  if last and last >= fence then
    fence = last + 1
  end
  redis.call('SET', fence_key, string.format('%.0f', fence), 'PX', lease)
  return fence
end

-- A queue entry's token, handoff lease and fence flag (nil for an entry that is not one of
-- ours).
local function entry_of(entry)
  return string.match(entry, '^(%S+) (%d+) ([01])$')
end

-- Grants the free (or released) `lock` to the first live waiter in `queue`, dropping the
-- entries of waiters nobody listens for, and names it on its client's channel for the lock
-- ("<token> <fence or 0>"): `channel` followed by the lock's key for `PUBLISH`, `channel`
-- itself (sharded) for `SPUBLISH`, then ':' and the client. Only that client hears it, and it
-- needs no command to take the lock: it has it. The lease is the waiter's handoff lease (its
-- ttl, at most a few seconds, so that a waiter whose process hangs blocks the lock only
-- briefly; a live one renews it at once). `head`, when given, is the queue's first entry,
-- already popped by the caller. Returns whether handed.
local function hand_off(lock, queue, channel, publish, head)
  if publish == 'PUBLISH' then
    channel = channel .. lock
  end
  for _ = 1, 16 do
    head = head or redis.call('LPOP', queue)
    if not head then
      return false
    end
    local token, lease, fenced = entry_of(head)
    if token then
      local fence = 0
      if fenced == '1' then
        fence = issue_fence(queue, lease)
      end
      -- pcall: a refused PUBLISH (an ACL without channel rights) proves nobody dead; the
      -- waiter is granted the lock and finds it on its next check.
      local heard = redis.pcall(publish, channel .. ':' .. string.match(token, '^[^:]*'),
        token .. ' ' .. string.format('%.0f', fence))
      if heard ~= 0 then
        redis.call('SET', lock, token, 'PX', lease)
        return true
      end
    end
    head = nil
  end
  return false
end
