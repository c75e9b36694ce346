#!lua flags=allow-oom
-- Sets the status of jobs just moved to the queue (queue_promote.lua) to queued, for RQ's
-- tools, where it is still the one they had: one claimed meanwhile keeps 'started', and a
-- job hash deleted meanwhile (rq's tools) is not made again.
-- KEYS: the jobs' hashes
-- ARGV: the status they had ('scheduled' or 'started')
-- Returns how many were set.
-- allow-oom: it only ever shortens a field that exists, so a full Redis (noeviction) lets it run,
-- as it lets the other queue scripts, which free memory before they write.
-- RQ's statuses and job fields: as svcgw.storage.rqformat names them (SCRIPT_STATUSES, SCRIPT_FIELDS).
local set = 0
for _, job in ipairs(KEYS) do
  if redis.call('HGET', job, 'status') == ARGV[1] then
    redis.call('HSET', job, 'status', 'queued')
    set = set + 1
  end
end
return set
