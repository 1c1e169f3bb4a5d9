-- Release a lock only if it is still ours, handing it to the first live lock waiter queued
-- for it (named in an announcement), if any; a waiter leaving the queue also gives up its
-- entry. (After protocol.lua and calls/release.lua, whose named arguments it reads; followed
-- by queue.lua, then release_queued.lua, which go on with its locals `lock`, `queue`, `ours`
-- and `head`.) WAITING.md is the protocol it keeps.
-- Returns RELEASED when the lock was ours (deleted or handed on), NOT_OURS when it had
-- expired, belongs to another owner or the key holds another kind, AGAIN_IN_FULL when
-- nothing was done and the call must come again in full: the next waiter wants a fence and
-- the fence record was not declared (a release declares it only then, so that the common
-- release pays for two keys, not three), or a bare release found a queue.
-- A bare release carries the token alone, without the channel and command a hand-off needs:
-- its holder took the lease without waiting, and such a key most often has nobody queued.
-- Each argument costs Redis a string to parse and Lua one to build, on every call.
-- pcall: a key of another type (WRONGTYPE) is not ours, and a refused PUBLISH (an ACL without
-- channel rights) must not turn a done release into an error; scripts are not rolled back.
--
-- The common case comes first, before queue.lua's functions are defined (each definition
-- costs every call that reaches it a closure): a holder releasing with nobody queued. A
-- queue's first entry, popped here, goes on to the hand-off.
local lock, queue = KEYS[1], KEYS[2]
local ours, head = nil, nil
if not leaving then
  ours = redis.pcall('GET', lock) == token
  if not ours then
    return NOT_OURS
  end
  if mode == 'm' then
    redis.call('DEL', lock)
    if redis.call('EXISTS', queue) == 1 then
      redis.pcall(publish, publish == 'PUBLISH' and channel .. lock or channel, '1')
    end
    return RELEASED
  end
  if not channel then
    if redis.call('EXISTS', queue) == 1 then
      return AGAIN_IN_FULL
    end
    redis.call('DEL', lock)
    return RELEASED
  end
  -- pcall: a queue key of another type is no queue of ours.
  head = redis.pcall('LPOP', queue)
  if type(head) ~= 'string' then
    redis.call('DEL', lock)
    return RELEASED
  end
end
