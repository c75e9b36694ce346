-- Moves due members of a sorted set (scheduled retries, or expired leases) to the queue
-- (worker.queue.DeliveryQueue.promote_due, reclaim_expired). ARGV[3] = 'front' puts them
-- first: a job whose worker died has waited longest. Their job hashes' status is set by
-- queue_mark.lua, which names them, since they are known only now.
-- KEYS: source sorted set, queue
-- ARGV: now, limit, 'front' or 'back'
-- Returns {score of the next member or false, the ids moved...}.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local push = 'RPUSH'
if ARGV[3] == 'front' then push = 'LPUSH' end
for start = 1, #ids, 500 do
  local chunk = {unpack(ids, start, math.min(start + 499, #ids))}
  redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call(push, KEYS[2], unpack(chunk))
end
local following = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {following[2] or false, unpack(ids)}
