-- The de-duplication window (svcgw.intake.dedup): prepended to the ingest script.
-- KEYS, ARGV: none of its own; dedup_window takes the ingest script's.
-- dedup_clock(mode, seconds, bucket) -> now, other: in 'buckets' mode, Redis's clock (TIME, whole
--   seconds) and, when its bucket is not `bucket` (the caller's, whose keys it named), that bucket's
--   number: the script then writes nothing and answers it. Other modes read no clock: nil, nil.
-- dedup_window(mode, expiry, k, first, now) -> w, over k[first], k[first + 1], ...: svcgw.intake.dedup.Plan.keys;
--   now: dedup_clock's (buckets mode)
--   w.fresh(field): whether no event with this field was seen in the window; if so it is now
--   w.close(): the expiries, once per post, after the last w.fresh

local function dedup_clock(mode, seconds, bucket)
  if mode ~= 'buckets' then return nil, nil end
  -- One clock for the bucket and its expiry: Redis's, whichever receiver posts.
  local now = tonumber(redis.call('TIME')[1])
  local n = math.floor(now / tonumber(seconds))
  if n ~= tonumber(bucket) then return now, n end
  return now, nil
end

local function dedup_window(mode, expiry, k, first, now)
  local current, previous, old = k[first], nil, first + 1
  if mode == 'buckets' then previous, old = k[first + 1], first + 2 end
  -- Layout 1's keys, one per keyed event in order, follow while they may be alive.
  local look_old = #k >= old
  local added = {}
  local w = {}
  function w.fresh(field)
    if look_old then
      local seen = redis.call('EXISTS', k[old]) == 1
      old = old + 1
      if seen then return false end
    end
    if mode == 'hsetex' then
      -- FNX: set only when the field is absent (an expired field is absent).
      if redis.call('HSETEX', current, 'FNX', 'EX', expiry, 'FIELDS', 1, field, 1) == 0 then return false end
    else
      if previous and redis.call('HEXISTS', previous, field) == 1 then return false end
      -- The value 1 is one of Redis's shared integers under noeviction: no allocation of its own.
      if redis.call('HSETNX', current, field, 1) == 0 then return false end
    end
    added[#added + 1] = field
    return true
  end
  function w.close()
    if #added == 0 then return end
    if mode == 'buckets' then
      -- Bucket n is looked at until the end of window n + 1, on the clock that numbered it.
      local seconds = tonumber(expiry)
      redis.call('EXPIREAT', current, (math.floor(now / seconds) + 2) * seconds)
      return
    end
    if mode == 'hexpire' then redis.call('HEXPIRE', current, expiry, 'FIELDS', #added, unpack(added)) end
    -- The fields expire by themselves; the key's own expiry is the net under them.
    redis.call('EXPIRE', current, expiry)
  end
  return w
end
