-- A reserved device/create slot now holds the new appid (receiver.gateway.quota.DeviceQuota.hold).
-- KEYS: reservations
-- ARGV: reservation id, appid
-- Returns 1 if renamed, 0 if the reservation is gone.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
redis.call('ZADD', KEYS[1], score, ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
