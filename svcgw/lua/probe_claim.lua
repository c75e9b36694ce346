-- Claims the liveness probes that are due (worker.prober.Prober.claim).
-- KEYS: probe schedule
-- ARGV: now, limit, interval, lease (expiry, also the claim's token),
--       instance key prefix, retry delay for an instance still being probed
-- Returns {score of the next due member or false, {appid, fields..., appid, ...}},
-- the fields being those after 'probing' in the HMGET below.
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local claimed = {}
for i = 1, #due, 2 do
  local appid, score = due[i], tonumber(due[i + 1])
  local key = ARGV[5] .. appid
  local f = redis.call('HMGET', key, 'maintained', 'probing',
    'status', 'since', 'proxy', 'offline_since', 'gap_code', 'gap_message', 'gap_at')
  if f[1] ~= '1' then
    redis.call('ZREM', KEYS[1], appid)
  elseif f[2] and tonumber(f[2]) > now then
    redis.call('ZADD', KEYS[1], math.min(tonumber(f[2]), now + tonumber(ARGV[6])), appid)
  else
    local following = score + interval * (math.floor((now - score) / interval) + 1)
    redis.call('ZADD', KEYS[1], following, appid)
    redis.call('HSET', key, 'probing', ARGV[4], 'next_probe', following)
    claimed[#claimed + 1] = appid
    for j = 3, #f do claimed[#claimed + 1] = f[j] end
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {head[2] or false, claimed}
