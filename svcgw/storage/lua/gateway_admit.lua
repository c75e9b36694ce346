-- Every check of a gateway call that reads Redis, in one round trip (receiver.gateway.admission).
-- KEYS[1]: the API key's look-up string (apikey-hash:<sha256>)
-- KEYS[2]: the hash of the key the look-up was remembered to name (svcgw.storage.keys.api_key)
-- KEYS[3]: the instance hash of the call's appid; read only when ARGV[4] is '1'
-- KEYS[4], KEYS[5]: the account's denied sets, the operator's and its own (keys.account_denied,
--   keys.account_own_denied)
-- KEYS[6..]: the account's window list of each rate limit (receiver.ratelimit.window_key)
-- ARGV[1]: now in milliseconds ('' for the Redis server's clock)
-- ARGV[2]: the account KEYS[4..] are named for: the one signed in (a console call), or the one
--   remembered for the key; '' when not known yet
-- ARGV[3]: the operation ("module/action"), lower case
-- ARGV[4]: '1' to read the owner of the instance of KEYS[3], else '0'
-- ARGV[5]: the key id KEYS[2] is named for ('' when not known yet)
-- ARGV[6]: '1' for a call made with a key; '0' for a call made for the account of ARGV[2], whose
--   KEYS[1] and KEYS[2] are names that never exist, not read
-- ARGV[7..]: per rate limit, in the order of KEYS[6..], its amount and its window in ms
-- Runs after clock.lua and rate_window.lua's body, the latter wrapped as the local function
-- rate_window(KEYS, ARGV) (see svcgw.storage.scripts), so the clock and the rate limit each have
-- one implementation.
-- Every key read or written is in KEYS, so that on a Redis Cluster all carry shard 0's tag
-- (svcgw.storage.keys). The caller names the key's hash and the account's keys from what it
-- remembers of the key; this checks that they are the key's, and reads nothing else otherwise.
-- Returns:
--   {0} for a missing, unknown or revoked key (nothing written);
--   {2, key id, account}: the look-up or the key's hash names another key id or account than the
--     call was named for (nothing written); the account is '' when the key id was wrong, as the
--     key's hash was not named. The caller calls again with the names of what was answered;
--   {1, account, stored key hash ('' without a key), allowed 1/0, ms until a call passes,
--    denied 1/0, owner of the instance ('' when unknown or not read)}.
-- On an admitted key, writes last_used (Unix seconds) on the key's hash, allowed or not; the rate
-- windows' writes stay in memory (not in the append-only file, not replicated; see below).
local now = clock_ms(ARGV[1])  -- clock.lua

local account, stored = ARGV[2], ''
if ARGV[6] == '1' then
  local key_id = redis.call('GET', KEYS[1])
  if not key_id then return {0} end
  if key_id ~= ARGV[5] then return {2, key_id, ''} end
  local fields = redis.call('HMGET', KEYS[2], 'account', 'hash', 'revoked_at', 'last_used')
  if not fields[1] or fields[1] == '' or not fields[2] or fields[2] == '' or fields[3] then return {0} end
  -- Named for another account: its windows and denied sets are not this key's.
  if fields[1] ~= account then return {2, key_id, fields[1]} end
  stored = fields[2]
  -- Written when the second changes: the same value as writing it on every call, and at most
  -- one write a second per key to persist and replicate.
  local second = tostring(math.floor(now / 1000))
  if fields[4] ~= second then redis.call('HSET', KEYS[2], 'last_used', second) end
end

local window_keys, window_args = {}, {tostring(now)}
for i = 6, #KEYS do
  window_keys[#window_keys + 1] = KEYS[i]
  window_args[#window_args + 1] = ARGV[2 * i - 5]
  window_args[#window_args + 1] = ARGV[2 * i - 4]
end
-- The windows are neither written to the append-only file nor replicated: a window is worth
-- nothing after a restart or a failover (it starts empty, as after a quiet minute), and with
-- appendfsync always, persisting it made every gateway call wait for a disk flush.
redis.set_repl(redis.REPL_NONE)
local verdict = rate_window(window_keys, window_args)
redis.set_repl(redis.REPL_ALL)

local denied = 0
local operation = ARGV[3]
for i = 4, 5 do
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    if string.lower(name) == operation then denied = 1 end
  end
end

local owner = ''
if ARGV[4] == '1' then owner = redis.call('HGET', KEYS[3], 'account') or '' end
return {1, account, stored, verdict[1], verdict[2], denied, owner}
