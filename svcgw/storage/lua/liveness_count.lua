-- Keeps the instance counts of /metrics in step with one instance's change
-- (svcgw.metrics.count_change); queued in a transaction before the write it counts.
-- KEYS: instance, instance counts, the set of every instance
-- ARGV: appid, new status ('' if unchanged), probe error change ('set', 'clear' or '')
-- Counts only registered instances, and only once the counts exist (see liveness_counts.lua).
-- Returns 1 if the counts were updated, else 0.
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 then return 0 end
local f = redis.call('HMGET', KEYS[1], 'status', 'probe_error')
local old = f[1]
if not old or old == '' then old = 'not_started' end
if ARGV[2] ~= '' and ARGV[2] ~= old then
  redis.call('HINCRBY', KEYS[2], 'status|' .. old, -1)
  redis.call('HINCRBY', KEYS[2], 'status|' .. ARGV[2], 1)
end
local had = f[2] and f[2] ~= ''
if ARGV[3] == 'clear' and had then
  redis.call('HINCRBY', KEYS[2], 'probe_errors', -1)
elseif ARGV[3] == 'set' and not had then
  redis.call('HINCRBY', KEYS[2], 'probe_errors', 1)
end
return 1
