-- The time of a call in milliseconds, one implementation for the scripts that count calls in
-- windows: prepended to rate_window.lua, gateway_admit.lua and signin_reserve.lua (svcgw.storage.scripts).
-- KEYS, ARGV: none of its own; clock_ms takes a value of its caller's ARGV.
-- clock_ms(given) -> milliseconds: `given` (the caller's clock, in ms) when it is not '', else the
--   Redis server's clock (TIME), which every process then shares.
local function clock_ms(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
