-- Who holds a lock and for how long, in one atomic read (for `LockClient::inspect`).
-- KEYS[1]: lock key
-- Returns {token or false, pttl}: pttl as PTTL gives it (-2: no key, -1: no expiry).
-- pcall: a key of another type is nobody's lock here.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then
  holder = false
end
return {holder, redis.call('PTTL', KEYS[1])}
