#!lua flags=allow-oom
-- Reads what the attempts of jobs claimed by queue_claim.lua need, and starts them (worker.claim).
-- KEYS: inflight, scheduled, then four per job: its job hash; the hash of its delivery's fields
--       (the job hash itself for a delivery named by its post, svcgw.deliveryid; a hash of its
--       own for a dlv_ one); its instance's callback hash; its account's callback hash; then the
--       parked sets the saturated destinations name (svcgw.delivery.probing)
-- ARGV: rq now, worker name, number of delivery fields, delivery fields...,
--       number of jobs, then per job: its id, the appid and the account its keys were named for;
--       then the number of saturated destinations, now, a seed in [0, 1), seconds a parked set
--       is kept, fours of a saturated destination (a URL's netloc, lower case), the time its
--       jobs are due again, over how many seconds after that they are lined up, and the index in
--       KEYS of the parked set they go to (0: none), then pairs of a saturated account and the
--       time its jobs are due again
-- Returns, per job in order:
--   {id, delivery fields, instance config (flat), account config (flat), destination}: started;
--   {id, appid, account}: its fields name another instance or account than its keys were named
--     for (the caller names them again; the job stays leased);
--   {id, 0, destination}: it went back to the scheduled registry (its destination or its account
--     has no free slot); its owner was the one named. The destination is '' where it was not read;
-- and nothing for a job whose lease is gone (it is another claim's now) or whose hash is gone.
-- A destination is the netloc of the address the job goes to, lower case: what the caller
-- learns of an instance to hold its next jobs back at the pop (queue_claim.lua).
-- allow-oom: a full Redis (noeviction) must still let the workers claim what was acknowledged,
-- since finishing deliveries is what frees memory; it writes a few short fields per job (a
-- status, a start time, a worker's name) and moves deferred ids between sorted sets.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
local nfields = tonumber(ARGV[3])
local fields = {}
for f = 4, 3 + nfields do fields[#fields + 1] = ARGV[f] end
local njobs = tonumber(ARGV[4 + nfields])
local first = 5 + nfields
local after_jobs = first + 3 * njobs
local nhosts = tonumber(ARGV[after_jobs])
local now, seed, park_ttl = ARGV[after_jobs + 1], tonumber(ARGV[after_jobs + 2]), ARGV[after_jobs + 3]
local saturated = {}
local last_host = after_jobs + 3 + 4 * nhosts
for s = after_jobs + 4, last_host, 4 do
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
local ids = {}
for j = 1, njobs do ids[j] = ARGV[first + 3 * (j - 1)] end
local held = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local configs = {}
for j = 1, njobs do
  local id = ids[j]
  local k = 2 + 4 * (j - 1)
  local job = KEYS[k + 1]
  if held[j] then
    local named_appid, named_account = ARGV[first + 3 * (j - 1) + 1], ARGV[first + 3 * (j - 1) + 2]
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
    if appid and (appid ~= named_appid or (account or '') ~= named_account) then
      answer[#answer + 1] = {id, appid, account or ''}
    elseif busy and appid then
      hand_back(id, job, busy, '')
    else
      if busy then data = redis.call('HMGET', KEYS[k + 2], unpack(fields)) end
      local config = {{}, {}, ''}
      if appid then
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
      local later = saturated[config[3]]
      if not later and account then later = busy_accounts[account] end
      if later then
        hand_back(id, job, later, config[3])
      -- Every job hash has a status, so HSET creating all three fields means
      -- the job was deleted while queued: skip it.
      elseif redis.call('HSET', job, 'status', 'started', 'started_at', ARGV[1], 'worker_name', ARGV[2]) == 3 then
        unleased[#unleased + 1] = id
        redis.call('DEL', job)
      else
        answer[#answer + 1] = {id, data, config[1], config[2], config[3]}
      end
    end
  end
end
if #unleased > 0 then redis.call('ZREM', KEYS[1], unpack(unleased)) end
for k, park in pairs(parks) do
  redis.call('ZADD', KEYS[k], unpack(park))
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  redis.call('EXPIRE', KEYS[k], park_ttl)
end
return answer
