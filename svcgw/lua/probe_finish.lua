-- Records a probe's outcome and drops its lease (worker.prober.Prober.finish).
-- KEYS: instance
-- ARGV: lease, probe time, seen ('1'/'0'), gap_at handled (or ''), probe error (or '')
-- Returns 0 if the instance is gone, else 1.
if redis.call('HGET', KEYS[1], 'probing') == ARGV[1] then redis.call('HDEL', KEYS[1], 'probing') end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
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
