-- One post to a receiver (svcgw.ingest); delivery.lua is prepended.
-- KEYS: receiver lookup, instance, log, delivery, job, queue, rq:queues,
--       then one dedup key per keyed event, in order
-- ARGV: appid, now, log retention, the post as the log keeps it (svcgw.calllog.stored_body),
--       event_type, envelope head,
--       dedup ttl, delivery id, queue key, job field count,
--       the post's log entry id ('' for a '*' entry naming a dlv_ delivery: svcgw.deliveryid),
--       job fields..., then per event: raw, keyed flag ('1': it has the next
--       dedup key; '0': it has no id and is always kept)
-- Returns {-1, 0, 0} for an unknown receiver, {-2, the log's last entry id} for an entry id
-- not above it (nothing written), else {1, accepted, duplicates}.
-- The /metrics counters of a post are not bumped here: the receiver counts in
-- memory and writes twice a second (svcgw.metrics.BufferedCounts).
local appid = ARGV[1]
-- The caller checked the token already; a token revoked since is refused here.
if redis.call('GET', KEYS[1]) ~= appid then return {-1, 0, 0} end
local account = redis.call('HGET', KEYS[2], 'account')
if not account then return {-1, 0, 0} end
local nfields = tonumber(ARGV[10])
local first_event = 12 + nfields * 2
local entry = ARGV[11] ~= '' and ARGV[11] or nil
if entry then
  local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
  if top and not entry_above(entry, top[1]) then return {-2, top[1]} end
end
local kept = {}
local total = 0
local i = first_event
local k = 8
while i <= #ARGV do
  if ARGV[i + 1] ~= '1' then
    kept[#kept + 1] = ARGV[i]
  else
    -- Only the key's presence is read. The value 1 is one of Redis's shared integers (under
    -- noeviction, svcgw.redisconf): no allocation of its own, 48 bytes fewer than the delivery id.
    if redis.call('SET', KEYS[k], 1, 'NX', 'EX', ARGV[7]) then
      kept[#kept + 1] = ARGV[i]
    end
    k = k + 1
  end
  total = total + 1
  i = i + 2
end
local delivery = ''
if #kept > 0 then
  delivery = ARGV[8]
  local body = ARGV[6] .. table.concat(kept, ',') .. ']}'
  local job = {}
  for f = 12, 11 + nfields * 2 do job[#job + 1] = ARGV[f] end
  write_delivery({delivery = KEYS[4], job = KEYS[5], queue = KEYS[6], rq_queues = KEYS[7]},
    appid, account, ARGV[5], body, ARGV[2], #kept, delivery, ARGV[9], job, total > #kept and {'dup', total - #kept} or nil)
end
log_post(KEYS[3], ARGV[3], ARGV[4], ARGV[2], delivery, #kept, total - #kept, entry)
return {1, #kept, total - #kept}
