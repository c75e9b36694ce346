-- The delivery record (svcgw.delivery.queueing): prepended to every script that writes one, so
-- the ingest script and queue_delivery write it from this one source.
-- KEYS, ARGV: none of its own; its functions take them from the script they are part of.
-- write_delivery(k, appid, account, event_type, body, now, count, delivery_id, queue_key, job, extra)
--   k: {delivery=, job=, queue=, rq_queues=} keys; job: RQ's job hash as field, value, ...;
--   extra: more fields of the delivery hash (field, value, ...), or nil; when k.delivery is
--   k.job, the delivery's fields go into the job hash (svcgw.storage.keys.delivery)
-- log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates, entry, fanned, top)
--   (the log entry naming the delivery is also what lists it: svcgw.delivery.listing); entry: the
--   entry's id when the delivery id is made of it (svcgw.deliveryid; no delivery field), else nil;
--   fanned: the further destinations' deliveries ('<delivery id>:<destination id> ...', field f), or nil;
--   top: the log's last entry id before this one, when the caller read it (with entry), else nil
-- write_fanned(keys, argv, k, a, count, fields, p): the deliveries of a post to further destinations
--   (the ingest script's; below)

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
-- The log's own expiry is a net under the trimming by age: it outlives the last post by the
-- retention. Set to the retention and a minute more, it need not be renewed by every post: only
-- by the first of each minute (of the entry ids' clock) and by any post whose caller did not read
-- the last entry. One command fewer per post for an instance posting more than once a minute.
local LOG_EXPIRY_SLACK = 60

local function renews_expiry(entry, top)
  if not entry or not top then return true end
  local minute = 60000
  return math.floor(tonumber(string.match(entry, '^(%d+)-')) / minute)
    ~= math.floor(tonumber(string.match(top, '^(%d+)-')) / minute)
end

local function log_post(log_key, retention, raw, now, delivery_id, accepted, duplicates, entry, fanned, top)
  local oldest = math.floor(tonumber(now) * 1000) - tonumber(retention) * 1000
  if oldest < 0 then oldest = 0 end
  local fields
  if entry then
    -- The entry id holds the time received; the counts are written only when they are not
    -- "every event of the post went" (svcgw.intake.calllog.counts).
    fields = {entry, 'body', raw}
    if tonumber(duplicates) > 0 or tonumber(accepted) == 0 then
      fields[#fields + 1] = 'x'
      fields[#fields + 1] = accepted .. ':' .. duplicates
    end
  else
    fields = {'*', 'body', raw, 'received_at', now, 'delivery', delivery_id, 'accepted', accepted,
      'duplicates', duplicates}
  end
  -- Only a post that fanned out has the field: any other's entry is as it always was.
  if fanned then
    fields[#fields + 1] = 'f'
    fields[#fields + 1] = fanned
  end
  redis.call('XADD', log_key, 'MINID', '~', oldest, unpack(fields))
  if renews_expiry(entry, top) then redis.call('EXPIRE', log_key, tonumber(retention) + LOG_EXPIRY_SLACK) end
end

-- The deliveries of one post to further destinations (svcgw.intake.fanout), after its primary's:
-- each named by the post and its destination (one hash, as the primary's; its delivery and job
-- keys are the same name), or a dlv_ delivery (a delivery hash naming the primary's id, and a job
-- hash), with the primary's body, in its destination's index (a stream: field d the primary's id
-- for one named by the post, its own follows from it; else its dlv_ id; MINID-trimmed to the log's
-- retention and expired with it).
-- keys, argv: the script's KEYS and ARGV; k: {queue=, rq_queues=, first=}, where keys[first], ...
-- are per destination its delivery, job and index; a: where in argv the first destination's
-- delivery id is (then its destination id and job fields); count, fields: how many destinations,
-- and the field count of each job hash; p: the primary's values {appid=, account=, event_type=,
-- body=, now=, events=, queue_key=, retention=, primary= (its delivery id), extra=}.
-- Returns the log entry's field f: the destination ids (named by the post: the ids follow from the
-- primary's), or '<delivery id>:<destination id>' pairs (dlv_), space-separated.
local function write_fanned(keys, argv, k, a, count, fields, p)
  local oldest = math.floor(tonumber(p.now) * 1000) - tonumber(p.retention) * 1000
  if oldest < 0 then oldest = 0 end
  local fanned = {}
  for d = 0, count - 1 do
    local id, destination = argv[a], argv[a + 1]
    local job = {}
    for f = a + 2, a + 1 + fields * 2 do job[#job + 1] = argv[f] end
    a = a + 2 + fields * 2
    local key = k.first + d * 3
    local named = keys[key] == keys[key + 1]
    -- Named by the post, its id names its destination (and the primary): no field for either.
    local extra = p.extra
    if not named then extra = {'destination', destination, 'primary', p.primary, unpack(p.extra or {})} end
    write_delivery({delivery = keys[key], job = keys[key + 1], queue = k.queue, rq_queues = k.rq_queues},
      p.appid, p.account, p.event_type, p.body, p.now, p.events, id, p.queue_key, job, extra)
    -- Every entry has the one field d: a listpack keeps only its value (and the id's delta) per entry.
    redis.call('XADD', keys[key + 2], 'MINID', '~', oldest, '*', 'd', named and p.primary or id)
    redis.call('EXPIRE', keys[key + 2], p.retention)
    if named then fanned[#fanned + 1] = destination else fanned[#fanned + 1] = id .. ':' .. destination end
  end
  return table.concat(fanned, ' ')
end
