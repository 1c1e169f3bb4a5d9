-- The arguments of every kind's acquire call, named (the order is `protocol.rs`'s
-- `ACQUIRE_ARGS`). KEYS: the key, the waiters' queue (Redlock: the awaited mark) and the
-- fence record, all in the key's cluster slot.
-- token: the owner token   lease: its lease ms   fenced: issue a fencing token
-- own: the kind's own argument: a semaphore's permit count; a reader's, the write token of
--   its own guard that it may read beside (a downgrade), or ''; a lock's ''
-- mode: how the caller waits: '0' it will not; 'q' in the queue; 'm' Redlock: it marks the
--   key awaited (`mode_lease` ms past the holder's lease), so that releases announce
-- For 'q': mode_lease: the queue's lease ms   handoff: the lease a release hands a waiter
--   channel: the release channel (for PUBLISH its prefix: the key follows)
--   publish: 'PUBLISH' or 'SPUBLISH'   most: the most entries the queue holds
--   fair: never taken past a live waiter queued earlier   queued: the caller queued before
--   (a check in: a release may have handed it the lease)
local token, lease, fenced, own, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4],
  ARGV[5]
local mode_lease, handoff, channel, publish, most, fair, queued = ARGV[6], ARGV[7], ARGV[8],
  ARGV[9], ARGV[10], ARGV[11] == '1', ARGV[12] == '1'
