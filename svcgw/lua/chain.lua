-- The order of an instance's service events (svcgw.deliveries): prepended to queue_delivery.lua
-- and queue_finish.lua. The instance's service-event deliveries that are neither delivered nor
-- dead are listed in its chain, oldest first. Only the first is in play (queued, claimed, or
-- waiting for a retry); each of the others is an RQ job with status 'deferred' in RQ's deferred
-- registry (rq-dashboard lists it there) until every one before it is delivered or dead.
-- KEYS, ARGV: none of its own; its functions take them from the script they are part of.
-- c: {chain=, queue=, deferred=, job_prefix=, delivery_prefix=, rq_now=}
-- chain_add(c, id, now): returns true if the new delivery waits behind earlier ones
-- chain_finished(chain, delivery_key, job_key, id, queue, deferred, rq_now): a service event of
--   that chain ended for good (delivered, dead, or dropped)

-- Whether a delivery of the chain asks nothing more of it: delivered (its job hash is then
-- deleted), dead, or gone (its data expired, or rq's tools deleted its job). The chain holds
-- no claim of its own on a delivery, so it never waits for one that cannot finish.
local function chain_settled(c, id)
  if redis.call('EXISTS', c.job_prefix .. id) == 0 then return true end
  local state = redis.call('HGET', c.delivery_prefix .. id, 'state')
  return (not state) or state == 'dead' or state == 'delivered'
end

-- Drop settled deliveries from the chain's front and put the first one left in play.
local function chain_advance(c)
  while true do
    local head = redis.call('LINDEX', c.chain, 0)
    if not head then return end
    if not chain_settled(c, head) then
      local job = c.job_prefix .. head
      if redis.call('HGET', job, 'status') == 'deferred' then
        redis.call('ZREM', c.deferred, head)
        redis.call('HSET', job, 'status', 'queued', 'enqueued_at', c.rq_now)
        redis.call('RPUSH', c.queue, head)
      end
      return
    end
    redis.call('LPOP', c.chain)
  end
end

-- A new service event, already written and queued by write_delivery: it stays queued when
-- nothing of its instance is ahead of it, and is taken off the queue and held otherwise.
local function chain_add(c, id, now)
  chain_advance(c)
  if redis.call('RPUSH', c.chain, id) == 1 then return false end
  -- write_delivery pushed it onto the queue's tail in this same script: no worker saw it.
  redis.call('LREM', c.queue, -1, id)
  redis.call('HSET', c.job_prefix .. id, 'status', 'deferred')
  redis.call('ZADD', c.deferred, now, id)
  return true
end

-- A service event ended for good: if it is at the front of its instance's
-- chain, the next one goes. A replayed dead letter is in no chain any more, so its end
-- changes nothing. The other deliveries' keys are named like this one's.
local function chain_finished(chain, delivery_key, job_key, id, queue, deferred, rq_now)
  if redis.call('LINDEX', chain, 0) ~= id then return end
  redis.call('LPOP', chain)
  chain_advance({chain = chain, queue = queue, deferred = deferred, rq_now = rq_now,
    job_prefix = string.sub(job_key, 1, #job_key - #id),
    delivery_prefix = string.sub(delivery_key, 1, #delivery_key - #id)})
end
