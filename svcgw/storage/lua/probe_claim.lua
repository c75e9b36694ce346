-- Claims up to `limit` liveness probes that are due, among those the caller names (worker.prober.Prober.claim).
-- KEYS: probe schedule, then the instance hash of each appid in ARGV, in the same order
-- ARGV: now, limit, interval, lease (expiry, also the claim's token), retry delay for an instance
--       still being probed, then the appids the caller read as due, first due first
-- Returns {score of the next due member or false, {appid, fields..., appid, ...}},
-- the fields being those after 'probing' in the HMGET below.
-- The caller reads the due members before this script runs, so that every instance hash it
-- touches is in KEYS. Meanwhile another worker may have claimed a named appid (its score is now
-- ahead), or an instance may have left the schedule: only a named appid whose score is still due
-- is looked at, and the others are left as they are (no ZADD that would bring one back). The
-- caller names more appids than `limit`, so that when workers read the same members, the later
-- script claims the next ones rather than nothing. Due members not claimed wait for a next claim.
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
if #KEYS ~= #ARGV - 4 then
  return redis.error_reply('probe_claim: one instance key per appid')
end
local claimed, count = {}, 0
for i = 2, #KEYS do
  if count >= limit then break end
  local appid, key = ARGV[i + 4], KEYS[i]
  local score = redis.call('ZSCORE', KEYS[1], appid)
  score = score and tonumber(score)
  if score and score <= now then
    local f = redis.call('HMGET', key, 'maintained', 'probing',
      'status', 'since', 'proxy', 'offline_since', 'gap_code', 'gap_message', 'gap_at')
    if f[1] ~= '1' then
      redis.call('ZREM', KEYS[1], appid)
    elseif f[2] and tonumber(f[2]) > now then
      redis.call('ZADD', KEYS[1], math.min(tonumber(f[2]), now + tonumber(ARGV[5])), appid)
    else
      local following = score + interval * (math.floor((now - score) / interval) + 1)
      redis.call('ZADD', KEYS[1], following, appid)
      redis.call('HSET', key, 'probing', ARGV[4], 'next_probe', following)
      count = count + 1
      claimed[#claimed + 1] = appid
      for j = 3, #f do claimed[#claimed + 1] = f[j] end
    end
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {head[2] or false, claimed}
