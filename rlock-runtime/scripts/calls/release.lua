-- The arguments of every kind's release call, named (the order is `protocol.rs`'s
-- `RELEASE_ARGS`). KEYS: the key, the waiters' queue (Redlock: the awaited mark) and, when
-- declared, the fence record.
-- token: the owner token
-- mode: 'q' waiters queue (the default when absent); 'm' Redlock: announce ("1") to every
--   waiter while the mark lives
-- channel: on Redis Cluster, the key's sharded release channel (SPUBLISH); absent or empty
--   on one server: PUBLISH on RELEASED_CHANNEL followed by the key
-- leaving: the caller is a waiter leaving the queue (giving up): its entry goes, and a lease
--   handed to it meanwhile is handed on; its entry's handoff lease ms, fence flag and kind
--   are `handoff`, `entry_fenced` and `entry_kind`
local token, mode, channel, leaving = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local handoff, entry_fenced, entry_kind = ARGV[5], ARGV[6], ARGV[7]
local publish = 'SPUBLISH'
if channel == nil or channel == '' then
  channel, publish = RELEASED_CHANNEL, 'PUBLISH'
end
