-- Hands claimed jobs back to the front of the queue (svcgw.delivery.queue.DeliveryQueue.release).
-- KEYS: inflight, queue, then each job's hash, in the order of the ids
-- ARGV: ids...
-- Returns how many were still claimed and went back.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
local released = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('LPUSH', KEYS[2], id)
    redis.call('HSET', KEYS[2 + i], 'status', 'queued')
    released = released + 1
  end
end
return released
