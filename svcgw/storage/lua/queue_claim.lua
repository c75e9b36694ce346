-- Claims up to ARGV[1] queued jobs for a worker: pops their ids and leases them
-- (worker.queue.DeliveryQueue.claim_batch).
-- KEYS: queue, inflight, scheduled
-- ARGV: count, lease until, then pairs of an appid and when its jobs are due again
-- Returns {how many went to the scheduled registry, the claimed ids, oldest first...}.
-- Their keys could not be named before the ids were known, so what their attempts need is
-- read, and each attempt started, by queue_read.lua, which names them. A worker that stops in
-- between leaves leases that run out: the jobs go back to the front of the queue
-- (queue_promote.lua), still queued.
-- A job of an instance the worker names goes straight to the scheduled registry, due when
-- the worker said, unleased and unread: the worker saw lately that the instance's account,
-- or the destination its address reaches, has no free slot in it. Its job hash is not
-- touched (this script cannot name it) and keeps the status queued until it is claimed.
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {0} end
local held_back = {}
local holding = false
for s = 3, #ARGV, 2 do
  held_back[ARGV[s]] = ARGV[s + 1]
  holding = true
end
local leases, later, claimed = {}, {}, {}
for _, id in ipairs(ids) do
  -- An id named by its post is '<appid>-<ms>-<seq>' (svcgw.deliveryid); a dlv_ id names none.
  local appid = holding and string.match(id, '^(.+)%-%d+%-%d+$')
  local due = appid and held_back[appid]
  if due then
    later[#later + 1] = due
    later[#later + 1] = id
  else
    claimed[#claimed + 1] = id
    leases[#leases + 1] = ARGV[2]
    leases[#leases + 1] = id
  end
end
if #later > 0 then redis.call('ZADD', KEYS[3], unpack(later)) end
if #leases > 0 then redis.call('ZADD', KEYS[2], unpack(leases)) end
return {#later / 2, unpack(claimed)}
