-- Claims up to ARGV[1] queued jobs for a worker: pops their ids and leases them
-- (svcgw.delivery.queue.DeliveryQueue.claim_batch).
-- KEYS: queue, inflight, scheduled, then the parked sets the holds below name (svcgw.delivery.breaker)
-- ARGV: count, lease until, now, seed (a number in [0, 1)), seconds a parked set is kept,
--       then fours: an appid, when its jobs are due again, over how many seconds after that they
--       are lined up (0: all then), and the index in KEYS of the parked set they go to (0: none)
-- Returns {how many went to the scheduled registry, the claimed ids, oldest first...}.
-- Their keys could not be named before the ids were known, so what their attempts need is
-- read, and each attempt started, by queue_read.lua, which names them. A worker that stops in
-- between leaves leases that run out: the jobs go back to the front of the queue
-- (queue_promote.lua), still queued.
-- A job of an instance the worker names goes straight to the scheduled registry, due when
-- the worker said, unleased and unread: the worker saw lately that the instance's account,
-- or the destination its address reaches, has no free slot in it. Its job hash is not
-- touched (this script cannot name it) and keeps the status queued until it is claimed.
-- A job held back for a destination whose attempts time out is also noted in that
-- destination's parked set, with the same score, so that it can be brought forward when the
-- destination answers again (queue_unpark.lua).
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {0} end
local held_back = {}
local holding = false
for s = 6, #ARGV, 4 do
  held_back[ARGV[s]] = {tonumber(ARGV[s + 1]), tonumber(ARGV[s + 2]), tonumber(ARGV[s + 3])}
  holding = true
end
local leases, later, claimed, parks = {}, {}, {}, {}
local seed, nth = tonumber(ARGV[4]), 0
for _, id in ipairs(ids) do
  -- An id named by its post is '<appid>-<ms>-<seq>' (svcgw.deliveryid); a dlv_ id names none, nor
  -- does a further destination's ('<appid>-<ms>-<seq>_<16 hex>'): neither is held back by instance,
  -- since what the worker saw of an instance is where its primary address's deliveries go.
  local appid = holding and string.match(id, '^(.+)%-%d+%-%d+$')
  local hold = appid and held_back[appid]
  if hold then
    local due = hold[1]
    if hold[2] > 0 then
      -- Spread evenly over the line, in no order the pop could repeat (the golden ratio's steps).
      nth = nth + 1
      due = due + hold[2] * ((seed + nth * 0.6180339887498949) % 1)
    end
    -- A long line comes back a second at a time: a promotion and a claim for many jobs, not one each.
    if hold[2] > 1 then due = math.ceil(due) end
    local score = string.format('%.6f', due)
    later[#later + 1] = score
    later[#later + 1] = id
    if hold[3] > 0 then
      local park = parks[hold[3]] or {}
      park[#park + 1] = score
      park[#park + 1] = id
      parks[hold[3]] = park
    end
  else
    claimed[#claimed + 1] = id
    leases[#leases + 1] = ARGV[2]
    leases[#leases + 1] = id
  end
end
if #later > 0 then redis.call('ZADD', KEYS[3], unpack(later)) end
for k, park in pairs(parks) do
  redis.call('ZADD', KEYS[k], unpack(park))
  -- Those due already came back and were claimed, or parked again with a new score.
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', ARGV[3])
  redis.call('EXPIRE', KEYS[k], ARGV[5])
end
if #leases > 0 then redis.call('ZADD', KEYS[2], unpack(leases)) end
return {#later / 2, unpack(claimed)}
