-- Claims up to ARGV[1] queued jobs for a worker: pops their ids and leases them
-- (worker.queue.DeliveryQueue.claim_batch). Their keys could not be named before the ids were
-- known, so what their attempts need is read, and each attempt started, by queue_read.lua,
-- which names them. A worker that stops in between leaves leases that run out: the jobs go
-- back to the front of the queue (queue_promote.lua), still queued.
-- KEYS: queue, inflight
-- ARGV: count, lease until
-- Returns the claimed ids, oldest first.
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {} end
local leases = {}
for i, id in ipairs(ids) do
  leases[2 * i - 1] = ARGV[2]
  leases[2 * i] = id
end
redis.call('ZADD', KEYS[2], unpack(leases))
return ids
