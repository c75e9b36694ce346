-- Gives keys of before their names of now, once per shard at an upgrade (svcgw.storage.renames): an
-- instance's keys of before the shard tags their tag, or a Cluster shard's keys their one tag.
-- Idempotent: an old name that is gone was moved already.
-- KEYS: pairs: old name, new name (svcgw.storage.renames)
-- ARGV: none
-- Returns {renamed, merged, left}: old keys renamed, merged into a new one that exists already
-- (by the key's type), and logs left under their old name (their entries and the new one's
-- overlap in time).
local renamed, merged, left = 0, 0, 0

-- The merged key keeps no expiry if either had none, else the later one.
local function keep_expiry(key, a, b)
  if a == -1 or b == -1 then redis.call('PERSIST', key)
  elseif a > 0 or b > 0 then redis.call('PEXPIRE', key, math.max(a, b)) end
end

-- The old key, holding both's contents now, takes the new name.
local function rename_merged(old, new, ttl_old, ttl_new)
  redis.call('RENAME', old, new)
  keep_expiry(new, ttl_old, ttl_new)
  merged = merged + 1
end

local function parse_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function id_below(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return am < bm or (am == bm and as < bs)
end

local function last_generated(stream)
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return info[i + 1] end
  end
  return '0-0'
end

-- A log written under both names: the old one's entries are older (the upgrade notes stop every
-- old process before a new one starts), so the new one's go after them under their own ids
-- (delivery ids are log entry ids). If they overlap (processes of both versions wrote at once),
-- the new log stays as it is and the old one under its name until it expires with its retention.
local function merge_log(old, new, ttl_old, ttl_new)
  local first = redis.call('XRANGE', new, '-', '+', 'COUNT', 1)[1]
  if first and not id_below(last_generated(old), first[1]) then
    left = left + 1
    return
  end
  for _, entry in ipairs(redis.call('XRANGE', new, '-', '+')) do
    redis.call('XADD', old, entry[1], unpack(entry[2]))
  end
  rename_merged(old, new, ttl_old, ttl_new)
end

local function merge_list(old, new, ttl_old, ttl_new)
  -- The old chain's service events came first: they stay ahead of the new one's.
  local ids = redis.call('LRANGE', new, 0, -1)
  for i = 1, #ids, 1000 do
    redis.call('RPUSH', old, unpack(ids, i, math.min(i + 999, #ids)))
  end
  rename_merged(old, new, ttl_old, ttl_new)
end

local function merge_set(old, new, ttl_old, ttl_new)
  redis.call('SUNIONSTORE', new, new, old)
  redis.call('DEL', old)
  keep_expiry(new, ttl_old, ttl_new)
  merged = merged + 1
end

local function merge_seq(old, new, ttl_old, ttl_new)
  -- Sequence numbers are never given twice: the higher count goes on.
  local a, b = tonumber(redis.call('GET', old)) or 0, tonumber(redis.call('GET', new)) or 0
  redis.call('SET', new, math.max(a, b))
  redis.call('DEL', old)
  merged = merged + 1
end

-- A hash under both names: the new one's fields stand, the old one's others join them, each with
-- its own expiry where the server keeps one per field.
local function merge_hash(old, new, ttl_old, ttl_new)
  local flat = redis.call('HGETALL', old)
  for i = 1, #flat, 2 do
    if redis.call('HSETNX', new, flat[i], flat[i + 1]) == 1 then
      local ok, ttl = pcall(redis.call, 'HPTTL', old, 'FIELDS', 1, flat[i])
      if ok and ttl[1] and ttl[1] > 0 then redis.call('HPEXPIRE', new, ttl[1], 'FIELDS', 1, flat[i]) end
    end
  end
  redis.call('DEL', old)
  keep_expiry(new, ttl_old, ttl_new)
  merged = merged + 1
end

local merges = {stream = merge_log, set = merge_set, list = merge_list, string = merge_seq, hash = merge_hash}
for i = 1, #KEYS, 2 do
  local old, new = KEYS[i], KEYS[i + 1]
  if redis.call('EXISTS', old) == 1 then
    if redis.call('EXISTS', new) == 0 then
      redis.call('RENAME', old, new)
      renamed = renamed + 1
    else
      local kind = redis.call('TYPE', old)['ok']
      local merge = merges[kind]
      if merge then
        merge(old, new, redis.call('PTTL', old), redis.call('PTTL', new))
      else
        left = left + 1
      end
    end
  end
end
return {renamed, merged, left}
