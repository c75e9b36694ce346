-- Moves due members of a sorted set (scheduled retries, or expired leases) to the queue
-- (worker.queue.DeliveryQueue.promote_due, reclaim_expired). ARGV[4] = 'front' puts them
-- first: a job whose worker died has waited longest.
-- KEYS: source sorted set, queue
-- ARGV: now, limit, job prefix, 'front' or 'back'
-- Returns {number moved, score of the next member or false}.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local push = 'RPUSH'
if ARGV[4] == 'front' then push = 'LPUSH' end
for start = 1, #ids, 500 do
  local chunk = {unpack(ids, start, math.min(start + 499, #ids))}
  redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call(push, KEYS[2], unpack(chunk))
end
for _, id in ipairs(ids) do
  redis.call('HSET', ARGV[3] .. id, 'status', 'queued')
end
local following = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#ids, following[2] or false}
