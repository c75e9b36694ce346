#!lua flags=allow-oom
-- Reads what the attempts of jobs claimed by queue_claim.lua need, and starts them (svcgw.delivery.claim).
-- KEYS: inflight, scheduled, then four per job: its job hash; the hash of its delivery's fields
--       (the job hash itself for a delivery named by its post, svcgw.deliveryid; a hash of its
--       own for a dlv_ one); its instance's callback hash and its account's callback hash, or,
--       for a delivery to a further destination, that destination's hash and its pace record
--       (svcgw.delivery.pacing); then the parked sets the saturated destinations name
--       (svcgw.delivery.breaker)
-- ARGV: rq now, worker name, number of delivery fields, delivery fields... (the last one
--       'destination': a dlv_ delivery's; one named by its post, '<appid>-<ms>-<seq>_<16 hex>', has
--       none and its destination is its id's), number of jobs, then per job: its id, the appid, the account and the
--       further destination ('' for none) its keys were named for; then the number of saturated
--       destinations, now, a seed in [0, 1), seconds a parked set is kept, seconds a job of a
--       disabled destination waits, fours of a saturated destination (an account's: the account, a
--       space and a URL's netloc, lower case, svcgw.delivery.claim.held_as; or the netloc alone: every account's),
--       the time its jobs are due again, over how many seconds after that they are lined up, and
--       the index in KEYS of the parked set they go to (0: none), then pairs of a saturated
--       account and the time its jobs are due again
-- Returns, per job in order:
--   {id, delivery fields, instance config (flat), account config (flat), destination}: started;
--     for a delivery to a further destination, the instance config is the destination's url,
--     secret and token (the same names; nothing when it was removed) and the account config empty;
--   {id, appid, account, further destination}: its fields name another instance, account or
--     further destination than its keys were named for (the caller names them again; the job
--     stays leased);
--   {id, 0, destination}: it went back to the scheduled registry (its destination or its account
--     has no free slot); its owner was the one named. The destination is '' where it was not read;
-- and nothing for a job whose lease is gone (it is another claim's now) or whose hash is gone.
-- A destination is the netloc of the address the job goes to, lower case: what the caller
-- learns of an instance to hold its next jobs back at the pop (queue_claim.lua).
-- A delivery to a further destination (docs/destinations.md) that is disabled goes back to the
-- scheduled registry for the recheck seconds; one over its destination's rate goes back due when
-- its turn comes (GCRA over the pace record: svcgw.delivery.pacing, whose arithmetic this is);
-- neither is an attempt. One whose destination was removed is started with no address: its
-- attempt fails (worker.sending).
-- allow-oom: a full Redis (noeviction) must still let the workers claim what was acknowledged,
-- since finishing deliveries is what frees memory; it writes a few short fields per job (a
-- status, a start time, a worker's name) and moves deferred ids between sorted sets.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
local nfields = tonumber(ARGV[3])
local fields = {}
for f = 4, 3 + nfields do fields[#fields + 1] = ARGV[f] end
local njobs = tonumber(ARGV[4 + nfields])
local first = 5 + nfields
local after_jobs = first + 4 * njobs
local nhosts = tonumber(ARGV[after_jobs])
local now, seed, park_ttl = ARGV[after_jobs + 1], tonumber(ARGV[after_jobs + 2]), ARGV[after_jobs + 3]
local recheck = tonumber(ARGV[after_jobs + 4])
local saturated = {}
local last_host = after_jobs + 4 + 4 * nhosts
for s = after_jobs + 5, last_host, 4 do
  saturated[ARGV[s]] = {tonumber(ARGV[s + 1]), tonumber(ARGV[s + 2]), tonumber(ARGV[s + 3])}
end
local busy_accounts = {}
for s = last_host + 1, #ARGV, 2 do busy_accounts[ARGV[s]] = {tonumber(ARGV[s + 1]), 0, 0} end
-- The host part of a URL, as Python's urlsplit(url).netloc.lower() has it.
local function netloc(url)
  local rest = string.match(url, '^[%a][%w+.-]*://(.*)$')
  if not rest then return '' end
  return string.lower(string.match(rest, '^([^/?#]*)'))
end
local function url_of(flat)
  for i = 1, #flat, 2 do
    if flat[i] == 'url' and flat[i + 1] ~= '' then return flat[i + 1] end
  end
  return nil
end
local unleased = {}
-- Its destination or its account has no free slot in this worker: back to the scheduled
-- registry, due at ``later``, without an attempt. A new status field means the job hash was
-- deleted while queued (rq's tools can do that).
-- A job held back for a destination whose attempts time out is also noted in its parked set,
-- with the same score (queue_claim.lua says why).
local answer = {}
local parks, nth = {}, 0
local function hand_back(id, job, hold, destination)
  unleased[#unleased + 1] = id
  if redis.call('HSET', job, 'status', 'scheduled') == 1 then
    redis.call('DEL', job)
  else
    local due = hold[1]
    if hold[2] > 0 then
      nth = nth + 1
      due = due + hold[2] * ((seed + nth * 0.6180339887498949) % 1)
    end
    -- A long line comes back a second at a time: a promotion and a claim for many jobs, not one each.
    if hold[2] > 1 then due = math.ceil(due) end
    local score = string.format('%.6f', due)
    redis.call('ZADD', KEYS[2], score, id)
    if hold[3] > 0 then
      local park = parks[hold[3]] or {}
      park[#park + 1] = score
      park[#park + 1] = id
      parks[hold[3]] = park
    end
    answer[#answer + 1] = {id, 0, destination}
  end
end
-- --- further destinations: their configuration and rate limit (svcgw.delivery.pacing) ---
-- The destination's hash as a callback hash's fields, flat; its netloc; whether it is disabled; its rate.
local function destination_config(key)
  local h = redis.call('HMGET', key, 'url', 'secret', 'token', 'enabled', 'rate')
  if not h[1] then return {{}, {}, '', false, nil} end
  local own = {'url', h[1], 'secret', h[2] or ''}
  if h[3] and h[3] ~= '' then own[5], own[6] = 'token', h[3] end
  local rate = tonumber(h[5] or '')
  if rate and rate <= 0 then rate = nil end
  return {own, {}, netloc(h[1]), h[4] == '0', rate}
end
local BURST = 1.0  -- seconds of deliveries at the rate that may go at once (pacing.BURST_SECONDS)
local paces = {}
-- nil when a job may go now at ``rate`` (pace_taken records it once started), else when its turn comes.
local function pace_due(dst, key, rate)
  local p = paces[dst]
  if not p then
    local stored = redis.call('HMGET', key, 't', 'h')
    p = {key = key, t = tonumber(stored[1] or '') or 0, h = tonumber(stored[2] or '') or 0, dirty = false}
    paces[dst] = p
  end
  local clock = tonumber(now)
  local tat = math.max(p.t, clock)
  if tat - clock <= BURST then return nil end
  -- Over the rate: due when the GCRA lets it go, and after every job handed back before it.
  local due = math.max(tat - BURST, p.h + 1 / rate)
  p.h, p.dirty = due, true
  return due
end
local function pace_taken(dst, rate)
  local p = paces[dst]
  p.t, p.dirty = math.max(p.t, tonumber(now)) + 1 / rate, true
end
-- --- end of further destinations ---
local ids = {}
for j = 1, njobs do ids[j] = ARGV[first + 4 * (j - 1)] end
local held = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local configs, dconfigs = {}, {}
for j = 1, njobs do
  local id = ids[j]
  local k = 2 + 4 * (j - 1)
  local job = KEYS[k + 1]
  if held[j] then
    local base = first + 4 * (j - 1)
    local named_appid, named_account, named_dst = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
    -- A job of an account named busy goes back whatever its destination: only its owner is
    -- read (the first two fields), not its body or its callback configuration.
    local busy = busy_accounts[named_account]
    local data
    if busy then
      data = redis.call('HMGET', KEYS[k + 2], fields[1], fields[2])
    else
      data = redis.call('HMGET', KEYS[k + 2], unpack(fields))
    end
    local appid, account = data[1], data[2]
    -- The further destination it goes to (not read for a busy account's: it goes back anyway).
    local dst = busy and named_dst or (data[nfields] or '')
    if dst == '' and not busy then
      -- Named by its post, a further destination's delivery keeps no field: its id ends in its
      -- destination's 16 hex digits (svcgw.deliveryid.parse_destination).
      local hex = string.match(id, '%-%d+%-%d+_(%x+)$')
      if hex then dst = 'dst_' .. hex end
    end
    if appid and (appid ~= named_appid or (account or '') ~= named_account or dst ~= named_dst) then
      answer[#answer + 1] = {id, appid, account or '', dst}
    elseif busy and appid then
      hand_back(id, job, busy, '')
    else
      if busy then data = redis.call('HMGET', KEYS[k + 2], unpack(fields)) end
      local config = {{}, {}, ''}
      if appid and dst ~= '' then
        config = dconfigs[dst]
        if not config then
          config = destination_config(KEYS[k + 3])
          dconfigs[dst] = config
        end
      elseif appid then
        config = configs[appid]
        if not config then
          local own = redis.call('HGETALL', KEYS[k + 3])
          local default = {}
          local url = url_of(own)
          if not url and account then
            default = redis.call('HGETALL', KEYS[k + 4])
            url = url_of(default)
          end
          config = {own, default, url and netloc(url) or ''}
          configs[appid] = config
        end
      end
      -- The destination's slots and probing are each account's own: its jobs are held back by their
      -- account and netloc; the host's ceiling across accounts by the netloc alone.
      local later = nil
      if account and config[3] ~= '' then later = saturated[account .. ' ' .. config[3]] end
      if not later then later = saturated[config[3]] end
      if not later and account then later = busy_accounts[account] end
      local rate = config[5]
      local turn = nil
      if rate and not later and not config[4] then turn = pace_due(dst, KEYS[k + 4], rate) end
      if later then
        hand_back(id, job, later, config[3])
      elseif config[4] then
        hand_back(id, job, {tonumber(now) + recheck, 0, 0}, config[3])
      elseif turn then
        hand_back(id, job, {turn, 0, 0}, config[3])
      -- Every job hash has a status, so HSET creating all three fields means
      -- the job was deleted while queued: skip it.
      elseif redis.call('HSET', job, 'status', 'started', 'started_at', ARGV[1], 'worker_name', ARGV[2]) == 3 then
        unleased[#unleased + 1] = id
        redis.call('DEL', job)
      else
        if rate then pace_taken(dst, rate) end
        answer[#answer + 1] = {id, data, config[1], config[2], config[3]}
      end
    end
  end
end
if #unleased > 0 then redis.call('ZREM', KEYS[1], unpack(unleased)) end
for _, p in pairs(paces) do
  if p.dirty then
    redis.call('HSET', p.key, 't', string.format('%.6f', p.t), 'h', string.format('%.6f', p.h))
    -- Kept while it says anything: a record gone reads as a destination with nothing owed.
    redis.call('PEXPIREAT', p.key, string.format('%.0f', math.ceil((math.max(p.t, p.h) + 1) * 1000)))
  end
end
for k, park in pairs(parks) do
  redis.call('ZADD', KEYS[k], unpack(park))
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  redis.call('EXPIRE', KEYS[k], park_ttl)
end
return answer
