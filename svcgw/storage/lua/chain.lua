-- The order of an instance's service events (svcgw.delivery.queueing): prepended to queue_delivery.lua,
-- queue_finish.lua and chain_advance.lua. The instance's service-event deliveries that are neither
-- delivered nor dead are listed in its chain, oldest first. Only the first is in play (queued,
-- claimed, or waiting for a retry); each of the others is an RQ job with status 'deferred' in RQ's
-- deferred registry (rq-dashboard lists it there) until every one before it is delivered or dead.
-- KEYS, ARGV: none of its own; its functions take them from the script they are part of. The
-- chain's members are the caller's to name: it read the list (svcgw.delivery.chainkeys) and passes, per
-- member id, its job hash and its delivery hash in KEYS, as chain_members reads them.
-- c: {chain=, queue=, deferred=, rq_now=, members=chain_members(...)}
-- chain_add(c, id, job, now): returns true if the new delivery waits behind earlier ones
-- chain_finished(c, id): a service event of that chain ended for good (delivered, dead, dropped)
-- chain_advance(c) and chain_finished return true when the chain's front is a member the caller
-- did not name (it was queued after the caller read the list): the caller advances it again
-- (chain_advance.lua) with the members read anew.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).

-- Member id -> {job=, delivery=}: the ids from ARGV[first_arg ..], their keys from KEYS[first_key ..].
local function chain_members(count, first_arg, first_key)
  local members = {}
  for i = 0, count - 1 do
    members[ARGV[first_arg + i]] = {job = KEYS[first_key + 2 * i], delivery = KEYS[first_key + 2 * i + 1]}
  end
  return members
end

-- Whether a delivery of the chain asks nothing more of it: delivered (its job hash is then
-- deleted), dead, or gone (its data expired, or rq's tools deleted its job). The chain holds
-- no claim of its own on a delivery, so it never waits for one that cannot finish.
local function chain_settled(member)
  if redis.call('EXISTS', member.job) == 0 then return true end
  local state = redis.call('HGET', member.delivery, 'state')
  return (not state) or state == 'dead' or state == 'delivered'
end

-- Drop settled deliveries from the chain's front and put the first one left in play.
local function chain_advance(c)
  while true do
    local head = redis.call('LINDEX', c.chain, 0)
    if not head then return false end
    local member = c.members[head]
    if not member then return true end
    if not chain_settled(member) then
      if redis.call('HGET', member.job, 'status') == 'deferred' then
        redis.call('ZREM', c.deferred, head)
        redis.call('HSET', member.job, 'status', 'queued', 'enqueued_at', c.rq_now)
        redis.call('RPUSH', c.queue, head)
      end
      return false
    end
    redis.call('LPOP', c.chain)
  end
end

-- A new service event, already written and queued by write_delivery: it stays queued when
-- nothing of its instance is ahead of it, and is taken off the queue and held otherwise.
local function chain_add(c, id, job, now)
  chain_advance(c)
  if redis.call('RPUSH', c.chain, id) == 1 then return false end
  -- write_delivery pushed it onto the queue's tail in this same script: no worker saw it.
  redis.call('LREM', c.queue, -1, id)
  redis.call('HSET', job, 'status', 'deferred')
  redis.call('ZADD', c.deferred, now, id)
  return true
end

-- A service event ended for good: if it is at the front of its instance's chain, the next one
-- goes. A replayed dead letter is in no chain any more, so its end changes nothing.
local function chain_finished(c, id)
  if redis.call('LINDEX', c.chain, 0) ~= id then return false end
  redis.call('LPOP', c.chain)
  return chain_advance(c)
end
