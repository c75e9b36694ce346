-- A worker's read of the destinations being probed on its shard (worker.breaker), forgetting
-- what has lapsed: an open record (back at the caps) after ARGV[2] seconds, any record that
-- nothing changed for ARGV[3] seconds.
-- KEYS: the probing hash
-- ARGV: now, open kept (seconds), forget after (seconds)
-- Returns the records kept, flat: destination, value, ...
local now, kept, forget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local found, gone = {}, {}
for i = 1, #all, 2 do
  local _, _, at, word = string.match(all[i + 1], '^(%d+):([^:]*):([^:]*):(%a):')
  at = tonumber(at)
  if not at or now - at > forget or (word == 'o' and now - at > kept) then
    gone[#gone + 1] = all[i]
  else
    found[#found + 1] = all[i]
    found[#found + 1] = all[i + 1]
  end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
return found
