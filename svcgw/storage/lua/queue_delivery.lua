-- One delivery of events the service made itself (svcgw.delivery.queueing.queue_delivery);
-- delivery.lua and chain.lua are prepended. Sent as EVAL, so it can be queued inside MULTI.
-- KEYS: delivery, job, queue, rq:queues, log, chain, seq counter, deferred registry, then per
--       member of the chain (as the caller read it, under WATCH): its job, its delivery; then
--       per further destination: its delivery, its job, the destination's index
-- ARGV: appid, account, event_type, now, event count, delivery id, queue key,
--       log retention, rq now, number of chain members, number of body pieces,
--       number of further destinations, the members' ids (the chain, oldest first), body pieces
--       (the envelope cut where each event's seq goes: one more than the events)..., when there
--       are further destinations: their job hashes' field count, then per destination its
--       delivery id, its id, its job fields...; then the job fields (field, value, ...)...
-- Each event gets the next sequence number of its instance (the seq member), and the
-- delivery waits behind the instance's earlier service events (chain.lua). Its deliveries to
-- the further destinations that take its event type are written as the ingest script writes a
-- post's (write_fanned, svcgw.intake.fanout), with the same body; they are in no chain.
-- Returns the seq of the first event. The chain not as named (the caller's WATCH prevents
-- it) is an error, before anything is written.
local members = tonumber(ARGV[10])
local npieces = tonumber(ARGV[11])
local fan_count = tonumber(ARGV[12])
local listed = redis.call('LRANGE', KEYS[6], 0, -1)
local same = #listed == members
for i = 1, #listed do same = same and listed[i] == ARGV[12 + i] end
if not same then return redis.error_reply('service-event chain changed since it was read') end
local count = tonumber(ARGV[5])
local last = redis.call('INCRBY', KEYS[7], count)
local first = last - count + 1
local parts = {}
local p0 = 12 + members
for i = 1, npieces do
  parts[#parts + 1] = ARGV[p0 + i]
  if i < npieces then parts[#parts + 1] = string.format('%d', first + i - 1) end
end
local body = table.concat(parts)
local fan_fields, fan_first = 0, 0
local job_first = p0 + npieces + 1
if fan_count > 0 then
  fan_fields = tonumber(ARGV[p0 + npieces + 1])
  fan_first = p0 + npieces + 2
  job_first = fan_first + fan_count * (2 + fan_fields * 2)
end
local job = {}
for f = job_first, #ARGV do job[#job + 1] = ARGV[f] end
write_delivery({delivery = KEYS[1], job = KEYS[2], queue = KEYS[3], rq_queues = KEYS[4]},
  ARGV[1], ARGV[2], ARGV[3], body, ARGV[4], ARGV[5], ARGV[6], ARGV[7], job)
redis.call('HSET', KEYS[1], 'chain', KEYS[6], 'seq', first)
local fanned = nil
if fan_count > 0 then
  fanned = write_fanned(KEYS, ARGV, {queue = KEYS[3], rq_queues = KEYS[4], first = 9 + 2 * members},
    fan_first, fan_count, fan_fields,
    {appid = ARGV[1], account = ARGV[2], event_type = ARGV[3], body = body, now = ARGV[4], events = ARGV[5],
     queue_key = ARGV[7], retention = ARGV[8], primary = ARGV[6], extra = nil})
end
chain_add({chain = KEYS[6], queue = KEYS[3], deferred = KEYS[8], rq_now = ARGV[9],
  members = chain_members(members, 13, 9)}, ARGV[6], KEYS[2], ARGV[4])
log_post(KEYS[5], ARGV[8], body, ARGV[4], ARGV[6], ARGV[5], 0, nil, fanned, nil)
return first
