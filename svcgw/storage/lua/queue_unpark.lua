-- Brings the jobs held back for a destination that answers again forward to now
-- (worker.breaker; svcgw.delivery.breaker): each id of its parked set still in the scheduled
-- registry with the score it was parked with is due now. One with another score was attempted
-- or scheduled again since, and keeps it: no job is ever due earlier than its schedule says.
-- KEYS: scheduled, the destination's parked set
-- ARGV: now, how many at most
-- Returns {how many were brought forward, how many are left in the parked set}.
local parked = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
if #parked == 0 then return {0, 0} end
local due, ids = {}, {}
for i = 1, #parked, 2 do
  local id = parked[i]
  ids[#ids + 1] = id
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) == tonumber(parked[i + 1]) and tonumber(score) > tonumber(ARGV[1]) then
    due[#due + 1] = ARGV[1]
    due[#due + 1] = id
  end
end
if #due > 0 then redis.call('ZADD', KEYS[1], 'XX', unpack(due)) end
redis.call('ZREM', KEYS[2], unpack(ids))
return {#due / 2, redis.call('ZCARD', KEYS[2])}
