-- One sign-in attempt reserved in every failure window at once, before its password is checked
-- (receiver.console.failures.FailureWindows.reserve).
-- KEYS: one sorted set per window (member: an attempt id, score: when it was reserved, in ms)
-- ARGV: the attempt id, then per window its amount and its length in ms
-- Returns {1, 0} when the attempt is counted in every window, or {0, ms until one fits} and
-- nothing is counted when any window is full: checked and counted in one step, so a burst of
-- attempts gets no more checks than the smallest amount.
local now = clock_ms('')  -- clock.lua: the Redis server's
local wait = 0
for i = 1, #KEYS do
  local amount = tonumber(ARGV[i * 2])
  local window = tonumber(ARGV[i * 2 + 1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local count = redis.call('ZCARD', KEYS[i])
  if count >= amount then
    local oldest = redis.call('ZRANGE', KEYS[i], count - amount, count - amount, 'WITHSCORES')
    local left = tonumber(oldest[2]) + window - now
    if left > wait then wait = left end
  end
end
if wait > 0 then return {0, wait} end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[i * 2 + 1]))
end
return {1, 0}
