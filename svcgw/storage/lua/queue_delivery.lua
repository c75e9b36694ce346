-- One delivery of events the service made itself (svcgw.delivery.queueing.queue_delivery);
-- delivery.lua and chain.lua are prepended. Sent as EVAL, so it can be queued inside MULTI.
-- Each event gets the next sequence number of its instance (the seq member), and the
-- delivery waits behind the instance's earlier service events (chain.lua).
-- KEYS: delivery, job, queue, rq:queues, log, chain, seq counter, deferred registry, then per
--       member of the chain (as the caller read it, under WATCH): its job, its delivery
-- ARGV: appid, account, event_type, now, event count, delivery id, queue key,
--       log retention, rq now, number of chain members, number of body pieces,
--       the members' ids (the chain, oldest first), body pieces (the envelope cut where each
--       event's seq goes: one more than the events)..., job fields (field, value, ...)...
-- Returns the seq of the first event. The chain not as named (the caller's WATCH prevents
-- it) is an error, before anything is written.
local members = tonumber(ARGV[10])
local npieces = tonumber(ARGV[11])
local listed = redis.call('LRANGE', KEYS[6], 0, -1)
local same = #listed == members
for i = 1, #listed do same = same and listed[i] == ARGV[11 + i] end
if not same then return redis.error_reply('service-event chain changed since it was read') end
local count = tonumber(ARGV[5])
local last = redis.call('INCRBY', KEYS[7], count)
local first = last - count + 1
local parts = {}
local p0 = 11 + members
for i = 1, npieces do
  parts[#parts + 1] = ARGV[p0 + i]
  if i < npieces then parts[#parts + 1] = string.format('%d', first + i - 1) end
end
local body = table.concat(parts)
local job = {}
for f = p0 + npieces + 1, #ARGV do job[#job + 1] = ARGV[f] end
write_delivery({delivery = KEYS[1], job = KEYS[2], queue = KEYS[3], rq_queues = KEYS[4]},
  ARGV[1], ARGV[2], ARGV[3], body, ARGV[4], ARGV[5], ARGV[6], ARGV[7], job)
redis.call('HSET', KEYS[1], 'chain', KEYS[6], 'seq', first)
chain_add({chain = KEYS[6], queue = KEYS[3], deferred = KEYS[8], rq_now = ARGV[9],
  members = chain_members(members, 12, 9)}, ARGV[6], KEYS[2], ARGV[4])
log_post(KEYS[5], ARGV[8], body, ARGV[4], ARGV[6], ARGV[5], 0)
return first
