-- After long/start: maintained again, first probe scheduled (svcgw.liveness.transitions.mark_started).
-- A long/start after an offline owes the caller an InstanceRecovered: the
-- first probe then comes at once, and the prober queues the event.
-- Keeps the instance counts of /metrics in step (as liveness_count.lua does).
-- KEYS: instance, probe schedule, instance counts, the set of every instance
-- ARGV: now, due (when no recovery is owed), appid
-- Returns 1 when a recovery is owed, else 0.
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 1 then
  local f = redis.call('HMGET', KEYS[1], 'status', 'probe_error')
  local old = f[1]
  if not old or old == '' then old = 'not_started' end
  if old ~= 'online' then
    redis.call('HINCRBY', KEYS[3], 'status|' .. old, -1)
    redis.call('HINCRBY', KEYS[3], 'status|online', 1)
  end
  if f[2] and f[2] ~= '' then redis.call('HINCRBY', KEYS[3], 'probe_errors', -1) end
end
local owed = redis.call('HEXISTS', KEYS[1], 'offline_since') == 1
local due = ARGV[2]
if owed then due = ARGV[1] end
redis.call('HSET', KEYS[1], 'maintained', '1', 'status', 'online', 'since', ARGV[1], 'next_probe', due)
redis.call('HDEL', KEYS[1], 'reason', 'action_required', 'probe_error',
  'gap_code', 'gap_message', 'gap_at', 'gap_manual')
redis.call('ZADD', KEYS[2], due, ARGV[3])
if owed then return 1 end
return 0
