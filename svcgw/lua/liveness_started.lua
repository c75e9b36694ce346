-- After long/start: maintained again, first probe scheduled (svcgw.liveness.mark_started).
-- A long/start after an offline owes the caller an InstanceRecovered: the
-- first probe then comes at once, and the prober queues the event.
-- KEYS: instance, probe schedule
-- ARGV: now, due (when no recovery is owed), appid
-- Returns 1 when a recovery is owed, else 0.
local owed = redis.call('HEXISTS', KEYS[1], 'offline_since') == 1
local due = ARGV[2]
if owed then due = ARGV[1] end
redis.call('HSET', KEYS[1], 'maintained', '1', 'status', 'online', 'since', ARGV[1], 'next_probe', due)
redis.call('HDEL', KEYS[1], 'reason', 'action_required', 'probe_error',
  'gap_code', 'gap_message', 'gap_at', 'gap_manual')
redis.call('ZADD', KEYS[2], due, ARGV[3])
if owed then return 1 end
return 0
