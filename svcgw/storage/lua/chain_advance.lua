-- Advances an instance's service-event chain (chain.lua prepended) after a finish or a queueing
-- found a member at its front that its caller had not named (svcgw.delivery.chainkeys.advance).
-- KEYS: chain, queue, deferred registry, then per member: job, delivery
-- ARGV: rq now, member ids...
-- Returns 1 when the front is still a member not named (the list changed again), else 0.
local m = #ARGV - 1
local c = {chain = KEYS[1], queue = KEYS[2], deferred = KEYS[3], rq_now = ARGV[1],
  members = chain_members(m, 2, 4)}
if chain_advance(c) then return 1 end
return 0
