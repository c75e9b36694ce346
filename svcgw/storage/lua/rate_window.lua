-- Moving-window rate limit of one account, every limit at once (receiver.ratelimit.RateLimiter.hit).
-- KEYS: one list of call timestamps per limit, newest first
-- ARGV: now in milliseconds ('' for the Redis server's clock), then per limit its amount and its window in ms
-- Returns {allowed (1/0), milliseconds until the next call passes (0 when allowed)}.
local now = clock_ms(ARGV[1])  -- clock.lua
local allowed = 1
local wait = 0
for i = 1, #KEYS do
  local amount = tonumber(ARGV[i * 2])
  local window = tonumber(ARGV[i * 2 + 1])
  local nth = redis.call('LINDEX', KEYS[i], amount - 1)
  if nth and tonumber(nth) > now - window then allowed = 0 end
end
for i = 1, #KEYS do
  local amount = tonumber(ARGV[i * 2])
  local window = tonumber(ARGV[i * 2 + 1])
  redis.call('LPUSH', KEYS[i], now)
  redis.call('LTRIM', KEYS[i], 0, amount - 1)
  redis.call('PEXPIRE', KEYS[i], window)
  if allowed == 0 then
    local oldest = redis.call('LINDEX', KEYS[i], amount - 1)
    if oldest then
      local left = tonumber(oldest) + window - now
      if left > wait then wait = left end
    end
  end
end
return {allowed, wait}
