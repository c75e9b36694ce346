-- A probe given up (shutdown): the lease goes and the probe is due again now
-- (worker.prober.Prober.release).
-- KEYS: instance, probe schedule
-- ARGV: lease, now, appid
-- Returns 1 if the lease was still this probe's, else 0.
if redis.call('HGET', KEYS[1], 'probing') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'probing')
redis.call('ZADD', KEYS[2], 'XX', 'LT', ARGV[2], ARGV[3])
return 1
