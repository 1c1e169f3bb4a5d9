-- The arguments of every kind's release call, named (the order is `protocol.rs`'s
-- `RELEASE_ARGS`). KEYS: the key, the waiters' queue (Redlock: the awaited mark) and, when
-- declared, the fence record.
-- token: the owner token, alone in a bare release (lock/release.lua)
-- channel: the release channel, given by the client: on one server its prefix (the key
--   follows), on Redis Cluster the key's sharded channel
-- publish: the command that announces on it, 'PUBLISH' or 'SPUBLISH'
-- mode: 'q' waiters queue (the default when absent); 'm' Redlock: announce ("1") to every
--   waiter while the mark lives
-- leaving: the caller is a waiter leaving the queue (giving up): its entry goes, and a lease
--   handed to it meanwhile is handed on; its entry's handoff lease ms, fence flag and kind
--   are `handoff`, `entry_fenced` and `entry_kind`
local token, channel, publish, mode, leaving = ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5] == '1'
local handoff, entry_fenced, entry_kind = ARGV[6], ARGV[7], ARGV[8]
