-- One delivery of events the service made itself (svcgw.deliveries.queue_delivery);
-- delivery.lua is prepended. Sent as EVAL, so it can be queued inside MULTI.
-- KEYS: delivery, job, queue, rq:queues, log, deliveries index
-- ARGV: appid, account, event_type, envelope body, now, event count, delivery id,
--       queue key, log retention, job fields (field, value, ...)...
local job = {}
for f = 10, #ARGV do job[#job + 1] = ARGV[f] end
write_delivery({delivery = KEYS[1], job = KEYS[2], queue = KEYS[3], rq_queues = KEYS[4]},
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], job)
log_post(KEYS[5], ARGV[9], ARGV[4], ARGV[5], ARGV[7], ARGV[6], 0)
index_delivery(KEYS[6], ARGV[9], ARGV[5], ARGV[7])
return 1
