-- A dead letter back to the queue for one fresh attempt (svcgw.delivery.deadletters.replay).
-- KEYS: failed, queue, delivery, old attempts list (svcgw.delivery.attemptrecords; most have none), job,
--       dead index, rq:queues
-- ARGV: id, failures that exhaust the schedule, queue key
-- Returns 1 if replayed, 0 if it is not a dead letter, -1 if its data expired.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[5]) == 0 or redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
redis.call('HSET', KEYS[3], 'state', 'queued', 'failures', ARGV[2])
redis.call('PERSIST', KEYS[3])
redis.call('PERSIST', KEYS[4])
redis.call('PERSIST', KEYS[5])
redis.call('HSET', KEYS[5], 'status', 'queued')
redis.call('HDEL', KEYS[5], 'exc_info', 'ended_at')
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('SADD', KEYS[7], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
