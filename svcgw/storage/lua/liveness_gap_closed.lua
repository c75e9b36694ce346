-- A GapClosed of a maintained instance, handed to the prober (svcgw.liveness.transitions.on_gap_closed).
-- A pending close that needs a QR scan is not overwritten by a later one that
-- only asks for a probe.
-- KEYS: instance, probe schedule
-- ARGV: code, message, now, appid, manual ('1'/'0')
-- Returns 1 if the instance is maintained (the probe is due now), else 0.
if redis.call('HGET', KEYS[1], 'maintained') ~= '1' then return 0 end
local pending = redis.call('HGET', KEYS[1], 'gap_manual')
if ARGV[5] == '1' or pending ~= '1' then
  redis.call('HSET', KEYS[1], 'gap_code', ARGV[1], 'gap_message', ARGV[2], 'gap_at', ARGV[3], 'gap_manual', ARGV[5])
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return 1
