-- Ends claims: records attempts and moves each job on (svcgw.delivery.queue.DeliveryQueue.finish_detailed).
-- KEYS: inflight, scheduled, failed, queue, deferred, failing destinations, probing destinations, then 8 per job:
--       delivery (the job hash itself for a delivery named by its post: svcgw.storage.keys.delivery),
--       old attempts list (svcgw.delivery.attemptrecords), job, RQ's results stream of the job (a dead
--       letter's failed run, which rq-dashboard shows), dead index, outcome stream, late outcomes
--       hash, its instance's service-event chain (touched only for a service event); then per
--       member of those chains, as the worker read them (svcgw.delivery.chainkeys): job, delivery
-- ARGV: now, rq ended_at, 'failing after:forget after' (seconds), log retention (seconds),
--       late hash expiry (unix seconds), outcome window (seconds), number of chain members,
--       'cap:probes' (svcgw.delivery.breaker.script_argument), the members' ids, then 13 per job: kind, id,
--       attempt record, due (retry, defer) or expiry (dead), ttl of the delivery record,
--       error text (zlib), failing record: the attempt's account's and destination's
--       (svcgw.delivery.failingorigins.name, '<account> <origin>'; '' when the attempt had none), chain
--       (non-empty for a service event, '' for a customer event, '?' if unknown: the
--       delivery's own 'chain' field says; its value, a key name, may be one of before the tags),
--       event ids (delivered: a JSON list kept instead of the body; '' keeps the body),
--       log entry id of the post (svcgw.deliveryid, for the primary's delivery and for a further
--       destination's named by the post, '<appid>-<ms>-<seq>_<16 hex>'; '' for a dlv_ delivery),
--       probe mark ('t:<start>' the attempt timed out, 'a' it answered a destination being probed, ''),
--       the probing record it moves: its account's and destination's (svcgw.delivery.breaker.name; '' for none)
--       dead: what rq-dashboard shows of it, JSON {d: description, r: [field, value, ...] of RQ's failed
--       result} (svcgw.delivery.recording.dead_letter_shown); '' for the others
-- A delivered delivery with a log entry id keeps only its bare outcome (svcgw.delivery.outcomes): its
-- records are deleted and the outcome goes to the stream, or to the late hash when it ended more
-- than the outcome window after its post; a further destination's (its id ends in '_' and the
-- destination id's 16 hex digits) has them too, its stream entry with 'd' those hex digits, its late
-- field the entry id, '_' and them. A dlv_ delivery keeps its hash until its ttl, as before.
-- Returns per job: 1 if the claim was still ours, else 0; plus 2 when this
-- attempt's account's destination started failing, 4 when it recovered (svcgw.delivery.failingorigins); plus 8 when its
-- chain's front is now a member the worker did not name (queued since it read the chain): the
-- worker advances that chain again (chain_advance.lua); plus 16 when the attempt changed its
-- destination's probing record, 32 when it was the first answer after timeouts (svcgw.delivery.breaker).
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
-- One script, so that a claim's end is one atomic step however many workers run: the attempt
-- recorded, the job moved on, what it tells of its destination and its chain, all or nothing.
-- Each concern is a part of its own, prepended (svcgw.storage.scripts):
-- chain.lua: a service event delivered, dead or dropped lets its instance's next one go;
-- breaker.lua: an attempt that timed out, or answered a destination being probed, moves the
-- attempts in flight the destination is allowed (svcgw.delivery.breaker);
-- failing.lua: a failed attempt starts its destination's failing, a delivered one ends it
-- (svcgw.delivery.failingorigins);
-- bare_outcome.lua: a delivered delivery named by its post keeps only its bare outcome
-- (svcgw.delivery.outcomes).
-- This file: the claims' leases ended, then per job, its end by kind (below), the failing and
-- probing records moved, and its chain let go.
local MEMBERS = tonumber(ARGV[7])
local HEAD, PER, KHEAD, KPER = 8 + MEMBERS, 13, 7, 8
local probe_cap, probe_floor = string.match(ARGV[8], '^(%d+):(%d+)$')
probe_cap, probe_floor = tonumber(probe_cap), tonumber(probe_floor)
local n = (#ARGV - HEAD) / PER
if n < 1 then return {} end
-- --- the claims' leases ended: which were still this worker's ---
local ids = {}
for i = 0, n - 1 do ids[#ids + 1] = ARGV[HEAD + 2 + i * PER] end
local held = redis.call('ZMSCORE', KEYS[1], unpack(ids))
redis.call('ZREM', KEYS[1], unpack(ids))
local now = ARGV[1]
local results = {}
-- --- failing destinations (failing.lua, svcgw.delivery.failingorigins) ---
local track = failing_tracker(KEYS[6], ARGV[3], now)
-- --- bare outcomes (bare_outcome.lua, svcgw.delivery.outcomes) ---
local outcome = bare_outcomes(now, ARGV[4], ARGV[5], ARGV[6])
-- --- per job: its destination's records moved, then its end by kind, then its chain ---
local members = chain_members(MEMBERS, 9, KHEAD + n * KPER + 1)
for i = 0, n - 1 do
  local b, kb = HEAD + 1 + i * PER, KHEAD + 1 + i * KPER
  local kind, id = ARGV[b], ARGV[b + 1]
  local delivery, legacy, job, result, dead = KEYS[kb], KEYS[kb + 1], KEYS[kb + 2], KEYS[kb + 3], KEYS[kb + 4]
  local record, due, ttl = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local claimed = 0
  if held[i + 1] then claimed = 1 end
  -- Its destination's failing (failing.lua) and probing (breaker.lua) records.
  local failing = 0
  if kind == 'delivered' then failing = track(ARGV[b + 6], true)
  elseif kind == 'retry' or kind == 'dead' then failing = track(ARGV[b + 6], false) end
  if ARGV[b + 10] ~= '' then
    failing = failing + probe_outcome(KEYS[7], ARGV[b + 11], ARGV[b + 10], now, probe_cap, probe_floor)
  end
  -- Its end by kind: gone (another copy delivered it), delivered (bare outcome or record), retry or
  -- dead (the record kept, the job scheduled or failed), defer, drop.
  local entry = ARGV[b + 9]
  local chain_of_bare = nil
  -- A delivery named by its post whose hash is gone was delivered by another copy of its job (a
  -- lease ran out meanwhile): this claim's end records nothing, lest it leave a hash behind.
  -- (A delivered one finds out from the hash it reads anyway: outcome() writes nothing then.)
  local gone = entry ~= '' and (kind == 'retry' or kind == 'dead' or kind == 'defer')
    and redis.call('EXISTS', delivery) == 0
  if gone then
    if claimed == 0 then redis.call('LREM', KEYS[4], 0, id) end
    redis.call('ZREM', KEYS[2], id)
  elseif kind == 'delivered' and entry ~= '' then
    -- A further destination's delivery named by its post: its id ends in its destination's hex digits.
    local destination = string.match(id, '%-%d+%-%d+_(%x+)$')
    chain_of_bare = outcome(delivery, record, entry, ARGV[b + 8], KEYS[kb + 5], KEYS[kb + 6], destination) or ''
    -- The results stream is there only for a dead letter replayed since: its failure is history now.
    redis.call('DEL', delivery, job, result)
    if claimed == 0 then
      redis.call('LREM', KEYS[4], 0, id)
      redis.call('ZREM', KEYS[2], id)
    end
  elseif kind == 'delivered' then
    -- The record is field a<count> of the delivery hash (svcgw.delivery.attemptrecords), in the HSET below.
    local count = redis.call('HINCRBY', delivery, 'attempts', 1)
    if ARGV[b + 8] ~= '' then
      -- The body is in the callback log already; the deliveries list needs only its event ids.
      -- Emptied in the same HSET rather than deleted: one command fewer.
      redis.call('HSET', delivery, 'state', 'delivered', 'delivered_at', now, 'a' .. count, record,
        'body', '', 'ids', ARGV[b + 8])
    else
      redis.call('HSET', delivery, 'state', 'delivered', 'delivered_at', now, 'a' .. count, record)
    end
    redis.call('EXPIRE', delivery, ttl)
    -- Only a delivery attempted before an upgrade can have the old list; it expires with the hash.
    if count > 1 then redis.call('EXPIRE', legacy, ttl) end
    redis.call('DEL', job, result)
    if claimed == 0 then
      -- Our lease ran out and the job was handed back; it is done now.
      redis.call('LREM', KEYS[4], 0, id)
      redis.call('ZREM', KEYS[2], id)
    end
  elseif kind == 'retry' or kind == 'dead' then
    local count = redis.call('HINCRBY', delivery, 'attempts', 1)
    redis.call('HINCRBY', delivery, 'failures', 1)
    if claimed == 0 then
      -- Another copy of this job is queued or running; it owns what comes next.
      redis.call('HSET', delivery, 'a' .. count, record)
    elseif kind == 'retry' then
      redis.call('HSET', delivery, 'a' .. count, record, 'state', 'retrying', 'next_at', due)
      redis.call('ZADD', KEYS[2], due, id)
      redis.call('HSET', job, 'status', 'scheduled')
    else
      redis.call('HSET', delivery, 'a' .. count, record, 'state', 'dead', 'dead_at', now)
      redis.call('HDEL', delivery, 'next_at')
      redis.call('ZADD', KEYS[3], due, id)
      redis.call('HSET', job, 'status', 'failed', 'exc_info', ARGV[b + 5], 'ended_at', ARGV[2])
      redis.call('EXPIRE', job, ttl)
      redis.call('EXPIRE', delivery, ttl)
      if count > 1 then redis.call('EXPIRE', legacy, ttl) end
      redis.call('SADD', dead, id)
      redis.call('EXPIRE', dead, ttl)
      if ARGV[b + 12] ~= '' then
        -- rq-dashboard shows a failed job's exc_info from RQ's results stream only (Result.save: at most
        -- 10 entries), kept as long as the dead letter.
        local shown = cjson.decode(ARGV[b + 12])
        redis.call('HSET', job, 'description', shown.d)
        redis.call('XADD', result, 'MAXLEN', 10, '*', unpack(shown.r))
        -- A stream's first node is allocated 4 KB up front; written back from its own dump it holds what
        -- its entries take: some 470 bytes for one entry instead of 4,400. Its expiry is set there too.
        redis.call('RESTORE', result, string.format('%d', tonumber(ttl) * 1000), redis.call('DUMP', result), 'REPLACE')
      end
    end
  elseif kind == 'defer' then
    if claimed == 1 then
      redis.call('ZADD', KEYS[2], due, id)
      redis.call('HSET', job, 'status', 'scheduled')
    end
  elseif kind == 'drop' then
    redis.call('DEL', job, result)
  end
  -- The order of service events (chain.lua): a job that ends for good lets the next go.
  if kind == 'delivered' or kind == 'drop' or (kind == 'dead' and claimed == 1) then
    local chain = ARGV[b + 7]
    if chain == '?' then chain = chain_of_bare or redis.call('HGET', delivery, 'chain') end
    if chain and chain ~= '' and chain_finished({chain = KEYS[kb + 7], queue = KEYS[4], deferred = KEYS[5],
        rq_now = ARGV[2], members = members}, id) then
      failing = failing + 8
    end
  end
  results[i + 1] = claimed + failing
end
return results
