-- Hands claimed jobs back to the front of the queue (worker.queue.DeliveryQueue.release).
-- KEYS: inflight, queue
-- ARGV: job prefix, ids...
-- Returns how many were still claimed and went back.
local released = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('LPUSH', KEYS[2], id)
    redis.call('HSET', ARGV[1] .. id, 'status', 'queued')
    released = released + 1
  end
end
return released
