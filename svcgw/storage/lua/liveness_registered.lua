-- Adds an instance to the set of every instance and, when it is new, to the
-- instance counts of /metrics (svcgw.registry.store.Store.register_instance).
-- KEYS: the set of every instance, instance counts, instance
-- ARGV: appid
-- Returns 1 if the instance is new, else 0.
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local f = redis.call('HMGET', KEYS[3], 'status', 'probe_error')
  local status = f[1]
  if not status or status == '' then status = 'not_started' end
  redis.call('HINCRBY', KEYS[2], 'status|' .. status, 1)
  if f[2] and f[2] ~= '' then redis.call('HINCRBY', KEYS[2], 'probe_errors', 1) end
end
return 1
