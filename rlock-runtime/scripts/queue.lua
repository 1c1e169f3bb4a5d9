-- Shared by every kind's acquire and release scripts (after protocol.lua and the call's
-- arguments): the waiters' queue of a lock, a semaphore or a read-write lock. WAITING.md is
-- the protocol these functions keep.
--
-- A key's queue is a list in the key's cluster slot, in arrival order. Each entry is
-- "<owner token> <handoff lease ms> <1 if fenced, else 0> <kind>": whom to grant, how, and
-- as what (`l`, `r`, `u`, `w`: see protocol.lua's ME; a permit's `p` followed by its semaphore's
-- count, `p3`). A release grants only entries of the kinds it serves (SERVED; a semaphore's
-- release, only its own count's), so a waiter is never granted another kind's lease, nor a
-- permit of a semaphore of another count; any other entry (a name used as two kinds) is
-- dropped, and its waiter, back at its next check in, is refused by what the key holds then,
-- or stands again.
-- An entry counts while its client listens: a release names the waiter it hands the lease to
-- on the channel of that waiter's client for this key (the client is the token up to its
-- first ':'), and skips an entry whose client has no subscriber on that channel (its process
-- died, or its subscription is not confirmed yet). So a dead waiter costs nothing, and
-- joining the queue costs one RPUSH.
--
-- Every key a script touches is declared: KEYS[1] the key, KEYS[2] its queue, KEYS[3] its
-- fence record, all in the key's slot (see `key::Companion`). A lock's release declares the
-- fence record only when it needs it (see `hand_off`).

-- A queue entry, as `entry_of` reads it.
local function entry(owner, lease_ms, fence_flag, kind)
  return owner .. ' ' .. lease_ms .. ' ' .. fence_flag .. ' ' .. kind
end

-- A queue entry's token, handoff lease, fence flag and kind; nil for an entry that is not one
-- of ours.
local function entry_of(text)
  return string.match(text, '^(%S+) (%d+) ([01]) ([lpruw]%d*)$')
end

-- A new fencing token for the lock whose fence record is `fence_key` (or, with `read_only`,
-- the current one), above every earlier one: max(last + 1, server time in microseconds). The
-- record expires with the lease, so no per-key record outlives its lock; once it is gone, the
-- server clock (which moved on by at least the lease) keeps the next fence above every
-- earlier one.
local function issue_fence(fence_key, lease, read_only)
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

-- What a `fits` of `hand_off` answers for an entry that will never fit: it goes.
local DROP = 'drop'

-- Grants the free (or released) `key` to the first live waiter in `queue` of a kind this
-- script serves, dropping the entries of waiters nobody listens for and of other kinds, and
-- names it on its client's channel for the key ("<token> <fence or 0>"): `channel` followed
-- by the key for `PUBLISH`, `channel` itself (sharded) for `SPUBLISH`, then ':' and the
-- client. Only that client hears it, and it needs no command to take the lease: it has it.
-- The lease is the waiter's handoff lease (its ttl, at most a few seconds, so that a waiter
-- whose process hangs blocks the key only briefly; a live one renews it at once). `head`,
-- when given, is the queue's first entry, already popped by the caller.
--
-- A waiter is live when its client's channel has a subscriber of its own: `PUBSUB NUMSUB`
-- (`SHARDNUMSUB`) counts exact subscriptions only, so a monitoring tool subscribed to a
-- pattern (`PSUBSCRIBE *`, which `PUBLISH`'s count includes) cannot make a dead waiter look
-- alive. Every entry of the queue may be looked at (at most MOST_ENTRIES), so a live waiter
-- behind any number of dead ones is granted at once.
--
-- `grant(token, lease, kind)`, when given, is how the caller's kind grants (a semaphore adds
-- a permit); without it the lock's key is set to the waiter's token. `fits(kind, token)`,
-- when given, tells whether the first live waiter can be granted now (a reader while a
-- writer holds cannot, nor a semaphore's hold of more permits than are free): when it
-- cannot, its entry is put back at the head, where it keeps its place, and nobody is
-- granted; when it answers DROP (an upgrade whose upgradeable read has ended), the entry
-- goes, and the next one is looked at. `served`, when given, is the one kind the caller
-- grants (a semaphore's `p` and count); without it, the letters of SERVED.
--
-- Returns 'handed', false (nobody live, or the first live waiter does not fit), or 'fence'
-- when the first live waiter wants a fence and `fence_key` is nil (a release that did not
-- declare the record): its entry is put back, and the caller calls again with the record
-- declared.
local function hand_off(key, queue, fence_key, channel, publish, head, grant, fits, served)
  local numsub = 'NUMSUB'
  if publish == 'PUBLISH' then
    channel = channel .. key
  else
    numsub = 'SHARDNUMSUB'
  end
  for _ = 1, MOST_ENTRIES do
    head = head or redis.call('LPOP', queue)
    if not head then
      return false
    end
    local token, lease, fenced, kind = entry_of(head)
    if token and (kind == served or not served and string.find(SERVED, kind, 1, true)) then
      local to = channel .. ':' .. string.match(token, '^[^:]*')
      -- pcall: a refused PUBSUB (an ACL without it) proves nobody dead; the waiter is
      -- granted the lease and finds it on its next check in.
      local listeners = redis.pcall('PUBSUB', numsub, to)
      local live = type(listeners) ~= 'table' or listeners[2] ~= 0
      if live and fits then
        local fit = fits(kind, token)
        if fit == DROP then
          live = false
        elseif not fit then
          redis.call('LPUSH', queue, head)
          return false
        end
      end
      if live then
        local fence = 0
        if fenced == '1' then
          if not fence_key then
            redis.call('LPUSH', queue, head)
            return 'fence'
          end
          fence = issue_fence(fence_key, lease)
        end
        if grant then
          grant(token, lease, kind)
        else
          redis.call('SET', key, token, 'PX', lease)
        end
        -- pcall: a refused PUBLISH (an ACL without channel rights) must not undo the grant;
        -- the waiter finds it on its next check in.
        redis.pcall(publish, to, token .. ' ' .. string.format('%.0f', fence))
        return 'handed'
      end
    end
    head = nil
  end
  return false
end

-- Stands a busy caller's entry `mine` in `queue`: a newcomer joins at its end (with `first`,
-- at its head: an upgrade, which no other waiter could pass anyway); a queued caller
-- (`queued`) keeps its place, and comes back at the end when its entry is gone (a hand-off
-- it missed, a release that skipped it while its client did not listen, a queue that
-- lapsed). So a live waiter is out of the queue for at most one check in. Every call keeps
-- the queue alive for `queue_lease` ms. Returns the entry's place (0: the head), or nil when
-- the queue already held `most` entries: the entry is taken back and the caller waits on
-- its timers.
local function stand(queue, mine, queued, queue_lease, most, first)
  local place = nil
  if queued then
    place = redis.call('LPOS', queue, mine)
  end
  local length = nil
  if not place and first then
    length = redis.call('LPUSH', queue, mine)
    place = 0
  elseif not place then
    length = redis.call('RPUSH', queue, mine)
    place = length - 1
  end
  redis.call('PEXPIRE', queue, queue_lease)
  if length and length > tonumber(most) then
    redis.call(first and 'LPOP' or 'RPOP', queue)
    return nil
  end
  return place
end
