-- A device/create quota slot (receiver.gateway.quota.DeviceQuota.reserve).
-- KEYS: account instances, reservations
-- ARGV: quota, reservation id, seconds
-- Returns 1 if the slot is taken, 0 if the quota is full. A reservation
-- already renamed to an appid that is registered is not counted twice.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local used = redis.call('SCARD', KEYS[1])
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('SISMEMBER', KEYS[1], member) == 0 then used = used + 1 end
end
if used >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]) + 1)
return 1
