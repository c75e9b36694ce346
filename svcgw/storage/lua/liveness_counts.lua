-- Computes the instance counts of /metrics from the instances, once: when they do
-- not exist yet (instances registered before they were kept, or a lost hash), or were
-- computed by an earlier rule (no 'shard' field). Afterwards every change keeps them in
-- step (liveness_count.lua).
-- KEYS: the set of every instance, instance counts, then the instance hash of each appid in ARGV
-- ARGV: now, this shard's index, then every appid the caller read from the set
--       (svcgw.metrics.rebuild_instance_counts)
-- Only the instances of this shard are counted: an instance's hash names its shard ('shard';
-- none: shard 0). Shard 0's set lists every shard's instances, as the registry, and an instance
-- of another shard has its liveness, and its count, on that shard: counted here as well, it
-- would be counted twice in /metrics, which sums the shards.
-- Returns 1 if the counts were computed, 0 if they existed, -1 if the set no longer holds exactly
-- the named appids (an instance registered or removed since the caller read it): nothing is
-- written, and the caller reads the set again. The caller names every instance hash, so that
-- this script touches only keys in KEYS; the set is compared here, in the same atomic step that
-- counts, because registrations made while the counts do not exist are not counted by anything
-- else (liveness_registered.lua counts only into existing counts).
local shard = ARGV[2]
if redis.call('HGET', KEYS[2], 'shard') == shard then return 0 end
local named = #ARGV - 2
if #KEYS ~= named + 2 then
  return redis.error_reply('liveness_counts: one instance key per appid')
end
-- The appids come from one SMEMBERS, so they are distinct: the same number, each a member, is
-- the same set. One SISMEMBER each rather than one SMISMEMBER, whose arguments would go through
-- unpack and its limit of about 8000 values.
if redis.call('SCARD', KEYS[1]) ~= named then return -1 end
for i = 3, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then return -1 end
end
local counts = {}
local errors = 0
for i = 3, #KEYS do
  local f = redis.call('HMGET', KEYS[i], 'status', 'probe_error', 'shard')
  local own = f[3]
  if not own or own == '' then own = '0' end
  if own == shard then
    local status = f[1]
    if not status or status == '' then status = 'not_started' end
    counts[status] = (counts[status] or 0) + 1
    if f[2] and f[2] ~= '' then errors = errors + 1 end
  end
end
local flat = {'built_at', ARGV[1], 'shard', shard, 'probe_errors', errors}
for status, n in pairs(counts) do
  flat[#flat + 1] = 'status|' .. status
  flat[#flat + 1] = n
end
-- Counts of an earlier rule are replaced whole.
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], unpack(flat))
return 1
