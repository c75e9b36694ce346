-- Failing destinations (svcgw.delivery.failingorigins): an attempt's outcome starts or ends
-- its account's destination's failing. Prepended to queue_finish.lua.
-- KEYS, ARGV: none of its own; failing_tracker takes the failing hash and the values from its caller.
-- A record is one account's destination (field '<account> <origin>'): another account's attempts to the same
-- origin neither start nor end it. A field of an origin alone (an earlier version's) is never named here.
-- Its value is '<first failure>:<last failure>:<1 once failing, else 0>'.
-- failing_tracker(hash, thresholds, now): thresholds 'failing after:forget after' (seconds); returns
-- track(name, ok), name the record's field ('' for none) and ok whether the attempt was answered 2xx:
-- it returns 2 when the destination started failing, 4 when it recovered, else 0. One HGET per record
-- a call names, more only while failing.
local function failing_tracker(hash, thresholds, now)
  local after_text, forget_text = string.match(thresholds, '^([^:]*):([^:]*)$')
  local failing_after, forget_after = tonumber(after_text), tonumber(forget_text)
  -- Each record as this call last read or wrote it (false: none): a batch holds many
  -- attempts to the same few destinations, and nothing else writes the hash while a script runs.
  local records = {}
  local function record_of(name)
    local held = records[name]
    if held == nil then
      held = redis.call('HGET', hash, name)
      records[name] = held
    end
    return held
  end
  local function set_record(name, value)
    if value then
      redis.call('HSET', hash, name, value)
    else
      redis.call('HDEL', hash, name)
    end
    records[name] = value
  end
  local function track(name, ok)
    if name == '' then return 0 end
    local held = record_of(name)
    if ok then
      if not held then return 0 end
      set_record(name, false)
      local first, _, flagged = string.match(held, '^([^:]*):([^:]*):(%d)$')
      if flagged == '1' or (first and tonumber(now) - tonumber(first) >= failing_after) then return 4 end
      return 0
    end
    if not held then
      set_record(name, now .. ':' .. now .. ':0')
      return 0
    end
    local first, last, flagged = string.match(held, '^([^:]*):([^:]*):(%d)$')
    if not first or tonumber(now) - tonumber(last) > forget_after then
      -- Unreadable, or forgotten: no attempt for so long that this failure starts afresh.
      first, flagged = now, '0'
    end
    local started = 0
    if flagged ~= '1' and tonumber(now) - tonumber(first) >= failing_after then
      flagged, started = '1', 2
    end
    set_record(name, first .. ':' .. now .. ':' .. flagged)
    return started
  end
  return track
end
