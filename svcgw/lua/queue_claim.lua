-- Claims up to ARGV[1] jobs with what their attempts need (worker.queue.DeliveryQueue.claim_batch).
-- KEYS: queue, inflight, scheduled
-- ARGV: count, lease until, worker name, rq now, job prefix, delivery prefix (dlv_ ids),
--       instance callback prefix, account callback prefix, number of
--       delivery fields, delivery fields..., the number of saturated
--       destinations, then pairs of a saturated destination (a URL's netloc,
--       lower case) and the time its jobs are due again, then pairs of a
--       saturated account and the time its jobs are due again
-- Returns {id, delivery fields, instance config (flat), account config (flat)} per claimed job.
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {} end
local nfields = tonumber(ARGV[9])
local fields = {}
for f = 10, 9 + nfields do fields[#fields + 1] = ARGV[f] end
local nhosts = tonumber(ARGV[10 + nfields])
local saturated = {}
local last_host = 10 + nfields + 2 * nhosts
for s = 11 + nfields, last_host, 2 do saturated[ARGV[s]] = ARGV[s + 1] end
local busy_accounts = {}
for s = last_host + 1, #ARGV, 2 do busy_accounts[ARGV[s]] = ARGV[s + 1] end
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
local configs = {}
local leases = {}
local claimed = {}
for _, id in ipairs(ids) do
  local job = ARGV[5] .. id
  -- A delivery named by its post (svcgw.deliveryid: appid-ms-seq) keeps its fields in its job
  -- hash; a dlv_ one in a hash of its own.
  local record = ARGV[6] .. id
  if string.find(id, '^[%w_%-]+%-%d+%-%d+$') then record = job end
  local data = redis.call('HMGET', record, unpack(fields))
  local config = {{}, {}, ''}
  local appid = data[1]
  if appid then
    config = configs[appid]
    if not config then
      local own = redis.call('HGETALL', ARGV[7] .. appid)
      local default = {}
      local url = url_of(own)
      if not url and data[2] then
        default = redis.call('HGETALL', ARGV[8] .. data[2])
        url = url_of(default)
      end
      config = {own, default, url and netloc(url) or ''}
      configs[appid] = config
    end
  end
  local later = saturated[config[3]]
  if not later and data[2] then later = busy_accounts[data[2]] end
  if later then
    -- Its destination or its account has no free slot in this worker: back to the
    -- scheduled registry without an attempt. A new status field means
    -- the job hash was deleted while queued (rq's tools can do that).
    if redis.call('HSET', job, 'status', 'scheduled') == 1 then
      redis.call('DEL', job)
    else
      redis.call('ZADD', KEYS[3], later, id)
    end
  -- Every job hash has a status, so HSET creating all three fields means
  -- the job was deleted while queued: skip it.
  elseif redis.call('HSET', job, 'status', 'started', 'started_at', ARGV[4], 'worker_name', ARGV[3]) == 3 then
    redis.call('DEL', job)
  else
    leases[#leases + 1] = ARGV[2]
    leases[#leases + 1] = id
    claimed[#claimed + 1] = {id, data, config[1], config[2]}
  end
end
if #leases > 0 then redis.call('ZADD', KEYS[2], unpack(leases)) end
return claimed
