-- Brings a retrying delivery's next attempt forward to now (svcgw.delivery.retrynow).
-- KEYS: scheduled, queue, delivery, job, rq:queues
-- ARGV: id, account ('' for any), queue key, now
-- Returns 1 if queued, 0 if there is no such delivery (or it is another account's),
-- -1 if it is not retrying, -2 if its next attempt is already under way.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
local owner = redis.call('HGET', KEYS[3], 'account')
if not owner or (ARGV[2] ~= '' and owner ~= ARGV[2]) then return 0 end
if redis.call('HGET', KEYS[3], 'state') ~= 'retrying' then return -1 end
if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return -2 end
redis.call('HSET', KEYS[4], 'status', 'queued')
redis.call('HSET', KEYS[3], 'next_at', ARGV[4])
redis.call('SADD', KEYS[5], ARGV[3])
-- At the queue's head: the next claim takes it.
redis.call('LPUSH', KEYS[2], ARGV[1])
return 1
