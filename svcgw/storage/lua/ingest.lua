-- One post to a receiver (svcgw.intake.ingest); delivery.lua and dedup.lua are prepended.
-- KEYS: receiver lookup, instance, log, delivery, job, queue, rq:queues,
--       per further destination (svcgw.intake.fanout; none for a post no destination takes): its
--       delivery, its job, the destination's index,
--       then the de-duplication window's keys (svcgw.intake.dedup.Plan.keys)
-- ARGV: appid, now, log retention, the post as the log keeps it (svcgw.intake.calllog.stored_body),
--       event_type, envelope head, de-duplication mode, expiry and bucket (svcgw.intake.dedup.Plan),
--       delivery id, queue key, job field count (with the number of further destinations after a
--       space, when there are any: '4 2'),
--       the post's log entry id ('' for a '*' entry naming a dlv_ delivery: svcgw.deliveryid),
--       job fields..., when there are further destinations: their job hashes' field count, then per
--       destination its delivery id, its id, its job fields...;
--       then per event: raw, its de-duplication field (svcgw.intake.envelope.RawEvent.digest;
--       '': it has no id and is always kept)
-- Returns {-1, 0, 0} for an unknown receiver, {-2, the log's last entry id} for an entry id
-- not above it, {-3, Redis's bucket} for de-duplication buckets named for another one than the
-- bucket of Redis's clock (nothing written in either case), else {1, accepted, duplicates}.
-- The /metrics counters of a post are not bumped here: the receiver counts in
-- memory and writes twice a second (svcgw.metrics.BufferedCounts).
local appid = ARGV[1]
-- The caller checked the token already; a token revoked since is refused here.
if redis.call('GET', KEYS[1]) ~= appid then return {-1, 0, 0} end
local account = redis.call('HGET', KEYS[2], 'account')
if not account then return {-1, 0, 0} end
local clock, other_bucket = dedup_clock(ARGV[7], ARGV[8], ARGV[9])
if other_bucket then return {-3, other_bucket} end
local nfields = tonumber(ARGV[12])
-- Further destinations: only a post some take pays for reading their count.
local fan_count, fan_fields, fan_first = 0, 0, 0
if not nfields then
  local n, d = string.match(ARGV[12], '^(%d+) (%d+)$')
  nfields, fan_count = tonumber(n), tonumber(d)
  fan_fields = tonumber(ARGV[14 + nfields * 2])
  fan_first = 15 + nfields * 2
end
local first_event = 14 + nfields * 2
if fan_count > 0 then first_event = fan_first + fan_count * (2 + fan_fields * 2) end
local entry = ARGV[13] ~= '' and ARGV[13] or nil
local top = nil
if entry then
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
  if last and not entry_above(entry, last[1]) then return {-2, last[1]} end
  top = last and last[1]
end
local kept = {}
local total = 0
local window = dedup_window(ARGV[7], ARGV[8], KEYS, 8 + fan_count * 3, clock)
local i = first_event
while i <= #ARGV do
  if ARGV[i + 1] == '' or window.fresh(ARGV[i + 1]) then
    kept[#kept + 1] = ARGV[i]
  end
  total = total + 1
  i = i + 2
end
window.close()
local delivery = ''
local fanned = nil
if #kept > 0 then
  delivery = ARGV[10]
  local body = ARGV[6] .. table.concat(kept, ',') .. ']}'
  local job = {}
  for f = 14, 13 + nfields * 2 do job[#job + 1] = ARGV[f] end
  local extra = total > #kept and {'dup', total - #kept} or nil
  write_delivery({delivery = KEYS[4], job = KEYS[5], queue = KEYS[6], rq_queues = KEYS[7]},
    appid, account, ARGV[5], body, ARGV[2], #kept, delivery, ARGV[11], job, extra)
  if fan_count > 0 then
    fanned = write_fanned(KEYS, ARGV, {queue = KEYS[6], rq_queues = KEYS[7], first = 8},
      fan_first, fan_count, fan_fields,
      {appid = appid, account = account, event_type = ARGV[5], body = body, now = ARGV[2], events = #kept,
       queue_key = ARGV[11], retention = ARGV[3], primary = delivery, extra = extra})
  end
end
log_post(KEYS[3], ARGV[3], ARGV[4], ARGV[2], delivery, #kept, total - #kept, entry, fanned, top)
return {1, #kept, total - #kept}
