-- Records a probe's outcome and drops its lease (worker.prober.Prober.finish).
-- Keeps the probe error count of /metrics in step (as liveness_count.lua does).
-- KEYS: instance, instance counts, the set of every instance
-- ARGV: lease, probe time, seen ('1'/'0'), gap_at handled (or ''), probe error (or ''), appid
-- Returns 0 if the instance is gone, else 1.
if redis.call('HGET', KEYS[1], 'probing') == ARGV[1] then redis.call('HDEL', KEYS[1], 'probing') end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('SISMEMBER', KEYS[3], ARGV[6]) == 1 then
  local before = redis.call('HGET', KEYS[1], 'probe_error')
  local had = before and before ~= ''
  if had and ARGV[5] == '' then
    redis.call('HINCRBY', KEYS[2], 'probe_errors', -1)
  elseif not had and ARGV[5] ~= '' then
    redis.call('HINCRBY', KEYS[2], 'probe_errors', 1)
  end
end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'last_probe', ARGV[2], 'last_seen', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'last_probe', ARGV[2])
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[1], 'probe_error')
else
  redis.call('HSET', KEYS[1], 'probe_error', ARGV[5])
end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[1], 'gap_at') == ARGV[4] then
  redis.call('HDEL', KEYS[1], 'gap_code', 'gap_message', 'gap_at', 'gap_manual')
end
return 1
