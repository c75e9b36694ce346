-- Moves due members of a sorted set (scheduled retries, or expired leases) to the queue
-- (svcgw.delivery.queue.DeliveryQueue.promote_due, reclaim_expired). ARGV[3] = 'front' puts them
-- first: a job whose worker died has waited longest. Their job hashes' status is set by
-- queue_mark.lua, which names them, since they are known only now.
-- KEYS: source sorted set, queue
-- ARGV: now, limit, 'front' or 'back'
-- Returns {score of the next member or false, the ids moved...}.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local push = 'RPUSH'
if ARGV[3] == 'front' then push = 'LPUSH' end
local queued = ids
if push == 'RPUSH' and #ids > 1 then
  -- Retries due at the same time come in id order, so an instance's are side by side (a delivery
  -- named by its post starts with its appid, svcgw.deliveryid): queued so, a claim's batch would
  -- hold one destination's jobs far over its cap. They go to the queue taking turns by instance
  -- instead, each instance's in their order; a dlv_ id is an instance of its own.
  local groups, order = {}, {}
  for _, id in ipairs(ids) do
    local owner = string.match(id, '^(.+)%-%d+%-%d+') or id
    local group = groups[owner]
    if not group then
      group = {}
      groups[owner] = group
      order[#order + 1] = group
    end
    group[#group + 1] = id
  end
  if #order > 1 then
    -- Each round takes one id of every instance that has one left: a call's work grows with its ids,
    -- not with its instances times its longest run.
    queued = {}
    local active, round = order, 1
    while #active > 0 do
      local left = {}
      for _, group in ipairs(active) do
        queued[#queued + 1] = group[round]
        if group[round + 1] then left[#left + 1] = group end
      end
      active, round = left, round + 1
    end
  end
end
for start = 1, #ids, 500 do
  redis.call('ZREM', KEYS[1], unpack(ids, start, math.min(start + 499, #ids)))
end
for start = 1, #queued, 500 do
  redis.call(push, KEYS[2], unpack(queued, start, math.min(start + 499, #queued)))
end
local following = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {following[2] or false, unpack(ids)}
