-- Every check of a gateway call that reads Redis, in one round trip (receiver.gateway.admission).
-- KEYS[1]: the API key's look-up string (apikey-hash:<sha256>); not read when ARGV[2] names the account
-- KEYS[2]: the instance hash of the call's appid; read only when ARGV[4] is '1'
-- ARGV[1]: now in milliseconds ('' for the Redis server's clock)
-- ARGV[2]: the account id, for a call made for an account already signed in; else ''
-- ARGV[3]: the operation ("module/action"), lower case
-- ARGV[4]: '1' to read the owner of the instance of KEYS[2], else '0'
-- Runs after two definitions made by Admission (receiver/gateway/admission.py): rate_window.lua's
-- body wrapped as the local function rate_window(KEYS, ARGV), so the rate limit has one
-- implementation, and NAMES, the key names this process uses, constant for its life (sent once
-- with the script rather than with every call):
--   NAMES[1], NAMES[2]: the name of a key's hash before and after the key id (svcgw.keys.api_key)
--   NAMES[3], NAMES[4]: the operator's denied set, before and after the account id (keys.account_denied)
--   NAMES[5], NAMES[6]: the account's own denied set, likewise (keys.account_own_denied)
--   NAMES[7..]: per rate limit, its window list's name before and after the account id, its amount,
--               its window in ms (receiver.ratelimit.window_key)
-- The names built here around the key or account id are not in KEYS because the ids are only known
-- here, and the call must stay one round trip. They belong to shard 0 like the KEYS: on a Redis
-- Cluster, NAMES carry shard 0's hash tag as its client's keys do (svcgw.clusterspace), so the
-- script touches one slot.
-- Returns {0} for a missing, unknown or revoked key (nothing written), else
-- {1, account, stored key hash ('' without a key), allowed 1/0, ms until a call passes,
--  denied 1/0, owner of the instance ('' when unknown or not read)}.
-- On an admitted key, writes last_used (Unix seconds) on the key's hash, allowed or not; the rate
-- windows' writes stay in memory (not in the append-only file, not replicated; see below).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

local account, stored = ARGV[2], ''
if ARGV[2] == '' then
  local key_id = redis.call('GET', KEYS[1])
  if not key_id then return {0} end
  local key_hash = NAMES[1] .. key_id .. NAMES[2]
  local fields = redis.call('HMGET', key_hash, 'account', 'hash', 'revoked_at', 'last_used')
  if not fields[1] or fields[1] == '' or not fields[2] or fields[2] == '' or fields[3] then return {0} end
  account, stored = fields[1], fields[2]
  -- Written when the second changes: the same value as writing it on every call, and at most
  -- one write a second per key to persist and replicate.
  local second = tostring(math.floor(now / 1000))
  if fields[4] ~= second then redis.call('HSET', key_hash, 'last_used', second) end
end

local window_keys, window_args = {}, {tostring(now)}
for i = 7, #NAMES, 4 do
  window_keys[#window_keys + 1] = NAMES[i] .. account .. NAMES[i + 1]
  window_args[#window_args + 1] = NAMES[i + 2]
  window_args[#window_args + 1] = NAMES[i + 3]
end
-- The windows are neither written to the append-only file nor replicated: a window is worth
-- nothing after a restart or a failover (it starts empty, as after a quiet minute), and with
-- appendfsync always, persisting it made every gateway call wait for a disk flush.
redis.set_repl(redis.REPL_NONE)
local verdict = rate_window(window_keys, window_args)
redis.set_repl(redis.REPL_ALL)

local denied = 0
local operation = ARGV[3]
for _, set in ipairs({NAMES[3] .. account .. NAMES[4], NAMES[5] .. account .. NAMES[6]}) do
  for _, name in ipairs(redis.call('SMEMBERS', set)) do
    if string.lower(name) == operation then denied = 1 end
  end
end

local owner = ''
if ARGV[4] == '1' then owner = redis.call('HGET', KEYS[2], 'account') or '' end
return {1, account, stored, verdict[1], verdict[2], denied, owner}
