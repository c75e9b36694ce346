-- The delivery record (svcgw.delivery.queueing): prepended to every script that writes one, so
-- the ingest script and queue_delivery write it from this one source.
-- KEYS, ARGV: none of its own; its functions take them from the script they are part of.
-- write_delivery(k, appid, account, event_type, body, now, count, delivery_id, queue_key, job, extra)
--   k: {delivery=, job=, queue=, rq_queues=} keys; job: RQ's job hash as field, value, ...;
--   extra: more fields of the delivery hash (field, value, ...), or nil; when k.delivery is
--   k.job, the delivery's fields go into the job hash (svcgw.storage.keys.delivery)
-- log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates, entry)
--   (the log entry naming the delivery is also what lists it: svcgw.delivery.listing); entry: the
--   entry's id when the delivery id is made of it (svcgw.deliveryid; no delivery field), else nil

local function write_delivery(k, appid, account, event_type, body, now, count, delivery_id, queue_key, job, extra)
  if k.delivery == k.job then
    -- Named by its post (svcgw.deliveryid): one hash, RQ's and the delivery's fields together;
    -- the time is the id's, and a missing state, attempts and failures read as queued, 0, 0.
    for _, value in ipairs({'appid', appid, 'account', account, 'event_type', event_type, 'body', body,
        unpack(extra or {})}) do
      job[#job + 1] = value
    end
    redis.call('HSET', k.job, unpack(job))
  else
    redis.call('HSET', k.delivery, 'appid', appid, 'account', account, 'event_type', event_type,
      'body', body, 'state', 'queued', 'received_at', now, 'attempts', 0, 'failures', 0,
      'events', count, unpack(extra or {}))
    redis.call('HSET', k.job, unpack(job))
  end
  -- RQ lists a queue by its name in rq:queues. Added when the queue's list is created,
  -- not on every push: the name stays there once added (one command fewer per post).
  if redis.call('RPUSH', k.queue, delivery_id) == 1 then redis.call('SADD', k.rq_queues, queue_key) end
end

-- Whether the stream entry id a is above b (both '<ms>-<seq>'): a log entry id proposed by the
-- receiver must be, or XADD refuses it.
local function entry_above(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams > bms or (ams == bms and tonumber(aseq) > tonumber(bseq))
end

-- One entry of the instance's callback log, trimmed to the retention by age.
local function log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates, entry)
  local oldest = math.floor(tonumber(now) * 1000) - tonumber(retention) * 1000
  if oldest < 0 then oldest = 0 end
  if entry then
    -- The entry id holds the time received; the counts are written only when they are not
    -- "every event of the post went" (svcgw.intake.calllog.counts).
    if tonumber(duplicates) > 0 or tonumber(accepted) == 0 then
      redis.call('XADD', log_key, 'MINID', '~', oldest, entry, 'body', raw, 'x', accepted .. ':' .. duplicates)
    else
      redis.call('XADD', log_key, 'MINID', '~', oldest, entry, 'body', raw)
    end
  else
    redis.call('XADD', log_key, 'MINID', '~', oldest, '*', 'body', raw, 'received_at', now,
      'delivery', delivery_id, 'accepted', accepted, 'duplicates', duplicates)
  end
  redis.call('EXPIRE', log_key, retention)
end
