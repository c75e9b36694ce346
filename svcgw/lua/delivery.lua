-- The delivery record (svcgw.deliveries): prepended to every script that writes one, so
-- the ingest script and queue_delivery write it from this one source.
-- KEYS, ARGV: none of its own; its functions take them from the script they are part of.
-- write_delivery(k, appid, account, event_type, body, now, count, delivery_id, queue_key, job)
--   k: {delivery=, job=, queue=, rq_queues=} keys; job: RQ's job hash as field, value, ...
-- log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates)
--   (the log entry naming the delivery is also what lists it: svcgw.deliverylist)

local function write_delivery(k, appid, account, event_type, body, now, count, delivery_id, queue_key, job)
  redis.call('HSET', k.delivery, 'appid', appid, 'account', account, 'event_type', event_type,
    'body', body, 'state', 'queued', 'received_at', now, 'attempts', 0, 'failures', 0,
    'events', count)
  redis.call('HSET', k.job, unpack(job))
  -- RQ lists a queue by its name in rq:queues. Added when the queue's list is created,
  -- not on every push: the name stays there once added (one command fewer per post).
  if redis.call('RPUSH', k.queue, delivery_id) == 1 then redis.call('SADD', k.rq_queues, queue_key) end
end

-- One entry of the instance's callback log, trimmed to the retention by age.
local function log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates)
  local oldest = math.floor(tonumber(now) * 1000) - tonumber(retention) * 1000
  if oldest < 0 then oldest = 0 end
  redis.call('XADD', log_key, 'MINID', '~', oldest, '*', 'body', raw, 'received_at', now,
    'delivery', delivery_id, 'accepted', accepted, 'duplicates', duplicates)
  redis.call('EXPIRE', log_key, retention)
end
