-- Computes the instance counts of /metrics from every instance, once: when
-- they do not exist yet (instances registered before they were kept, or a
-- lost hash). Afterwards every change keeps them in step (liveness_count.lua).
-- (svcgw.metrics.rebuild_instance_counts)
-- KEYS: the set of every instance, instance counts
-- ARGV: now, instance key prefix
-- Returns 1 if the counts were computed, 0 if they existed.
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local counts = {}
local errors = 0
for _, appid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', ARGV[2] .. appid, 'status', 'probe_error')
  local status = f[1]
  if not status or status == '' then status = 'not_started' end
  counts[status] = (counts[status] or 0) + 1
  if f[2] and f[2] ~= '' then errors = errors + 1 end
end
local flat = {'built_at', ARGV[1], 'probe_errors', errors}
for status, n in pairs(counts) do
  flat[#flat + 1] = 'status|' .. status
  flat[#flat + 1] = n
end
redis.call('HSET', KEYS[2], unpack(flat))
return 1
