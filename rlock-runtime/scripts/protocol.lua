-- The calling convention every lease script keeps, named once and prepended to each of them
-- (after the line that names the script's kind, `ME` and `SERVED`). `backend/protocol.rs`
-- is its other half; a test holds the two to the same names and values. `state.lua` reads
-- what a key holds (`kind_of`) and Redis's clock.
--
-- ME: the queue-entry letter of the kind this script leases ('l' a lock, 'p' a permit of a
-- semaphore, 'r' a reader, 'u' the upgradeable reader or 'w' the writer of a read-write
-- lock); SERVED: the letters whose waiters its releases may grant ('rwu' for a read-write
-- lock's roles).

-- What a key holds, as `kind_of` (state.lua) finds it and as a refusal names it. A name is
-- one kind of thing: every script reads what its key holds before it changes anything, and
-- refuses another kind's state (OTHER_KIND) or leaves it untouched (releases, renewals,
-- extends: a lock's by its string, which only a lock holds).
local FREE, LOCK, SEMAPHORE, READ_WRITE, FOREIGN = 0, 1, 2, 3, 4
-- The members that mark a sorted set as rlock's: a semaphore's count, scored by minus the
-- count; a read-write lock's mark, scored 0 (between the writer's negative score and the
-- readers' positive ones, so no range of holders ever reaches it).
local PERMITS_MEMBER, READ_WRITE_MEMBER = '#permits', '#rw'
-- Beside a read-write lock's upgradeable reader (whose lease is a reader's), the member that
-- names it: this prefix and its token, scored 0 as the mark is (see rw/common.lua).
local UPGRADER_MARK = '#up:'
-- An acquire's answers, first in its reply: BUSY {0, pttl} (queued if asked); TAKEN {1,
-- fence}; HANDED {2, fence, pttl}, by a release before this call; FULL {3, pttl}, busy and
-- not queued; OTHER_COUNT {4, stored count}; OTHER_KIND {5, what the key holds}; NOT_HELD
-- {6}, an upgrade whose upgradeable read is no longer held (of a `lock_all`, {6, i}: KEYS[i],
-- which the caller held, no longer holds its token).
local BUSY, TAKEN, HANDED, FULL, OTHER_COUNT, OTHER_KIND, NOT_HELD = 0, 1, 2, 3, 4, 5, 6
-- A busy answer's pttl when it tells no lease: NOT_TOLD (a waiter behind others, whose client's
-- next waiter may join the queue with a plain RPUSHX), and RECOUNTED (a semaphore's waiter
-- behind others under a count set at run time: a plain join's entry would carry its caller's
-- count, which no release of that semaphore serves, so the client's next waiter arrives
-- through the script).
local NOT_TOLD, RECOUNTED = -3, -4
-- A release's answers: NOT_OURS (it ended, or is another's, or another kind's), RELEASED
-- (given back or handed on), AGAIN_IN_FULL (nothing done: the call must come again in full,
-- the fence record declared and the hand-off's arguments given, because the waiter next wants
-- a fence, or a bare release, its token alone, found a queue).
local NOT_OURS, RELEASED, AGAIN_IN_FULL = 0, 1, -1
-- The most entries a script looks at in one call: the queue's bound (WAITERS_QUEUE_MAX) and
-- room for appends beyond it that their callers take back. Every loop over a queue stops
-- there: a script that cannot finish stops the whole server.
local MOST_ENTRIES = 10100
-- The most permits one hold of a semaphore takes at once (`permits(n)`): each is a member of
-- the set, and all of them are written in one command.
local MOST_TAKEN = 1000
-- The most holders an inspection lists (a semaphore's, a read-write lock's readers): it
-- counts them all, and names this many.
local MOST_LISTED = 64
