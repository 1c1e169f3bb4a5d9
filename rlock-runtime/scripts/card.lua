-- Post a client's holder card: a hash naming the client (fields '@service', '@host', '@pid')
-- and, per hold it has kept for a while, the hold's number and when it was granted (unix ms).
-- Operators' tools read it to say who holds a lock (`LockClient::inspect`); no lock script
-- reads or writes it.
-- KEYS[1]: the card   ARGV[1]: its lease ms   ARGV[2]: n, the field pairs that follow
-- ARGV[3 .. 2+2n]: fields and values to set   ARGV[3+2n ..]: fields to delete
-- Returns 1 if the card was there before this call, 0 if not (it expired: the caller posts
-- it whole again). A card left with only the client's name is deleted.
local card, lease, sets = KEYS[1], ARGV[1], tonumber(ARGV[2])
local existed = redis.call('EXISTS', card)
if sets > 0 then
  redis.call('HSET', card, unpack(ARGV, 3, 2 + 2 * sets))
end
if #ARGV > 2 + 2 * sets then
  redis.call('HDEL', card, unpack(ARGV, 3 + 2 * sets))
end
if redis.call('HLEN', card) <= 3 then
  redis.call('DEL', card)
else
  redis.call('PEXPIRE', card, lease)
end
return existed
