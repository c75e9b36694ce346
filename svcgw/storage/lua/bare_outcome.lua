-- Bare outcomes (svcgw.delivery.outcomes): what is kept of a delivered delivery named by its post, its
-- records deleted. Prepended to queue_finish.lua.
-- KEYS, ARGV: none of its own; bare_outcomes takes the values from its caller, and outcome the keys.
-- bare_outcomes(now, retention, late_expiry, window): now (unix seconds), the log's retention (seconds),
-- when a late outcomes hash expires (unix seconds), the outcome window (seconds); returns
-- outcome(delivery, record, entry, event_ids, out, late, destination), which writes the delivery's bare
-- outcome from its hash and this attempt's record to its instance's outcome stream (out), or to its
-- late outcomes hash (late) when it ended more than the window after its post, and returns the
-- hash's chain field; it writes nothing and returns nil when the hash is gone.
local function bare_outcomes(now, retention, late_expiry, window)
  local function error_class(text)
    if type(text) ~= 'string' then return 'other' end
    local t = string.lower(text)
    local function has(word) return string.find(t, word, 1, true) ~= nil end
    if has('timed out') or has('timeout') then return 'timeout' end
    if has('refused') then return 'refused' end
    if has('ssl') or has('tls') or has('certificate') then return 'tls' end
    if has('name or service') or has('resolve') or has('dns') or has('getaddrinfo') then return 'dns' end
    if has('reset') or has('broken pipe') or has('disconnect') then return 'reset' end
    return 'other'
  end
  -- One attempt record (JSON, svcgw.delivery.attempt.Attempt.record) as '<ms after the post>:<status or class>:<ms>'.
  local function bare(record, base_ms)
    local ok, data = pcall(cjson.decode, record)
    if not ok or type(data) ~= 'table' then return nil end
    local at = tonumber(data.at) or 0
    local kind = data.status
    if type(kind) ~= 'number' then kind = error_class(data.error) else kind = string.format('%d', kind) end
    local duration = tonumber(data.duration_ms) or 0
    return string.format('%d:%s:%d', math.floor(at * 1000 + 0.5) - base_ms, kind, math.floor(duration + 0.5))
  end
  local now_ms = math.floor(tonumber(now) * 1000)
  local oldest = math.max(now_ms - tonumber(retention) * 1000, 0)
  -- The outcome streams this call has added to and set to expire: once each is enough, as every
  -- entry of the call is added at the same time.
  local expiring = {}
  -- The delivered delivery's bare outcome from its hash and this attempt's record; nothing is
  -- written when the hash is gone (another copy of the job delivered it already).
  local function outcome(delivery, record, entry, event_ids, out, late, destination)
    local stored = redis.call('HGETALL', delivery)
    if #stored == 0 then return nil end
    local h = {}
    for j = 1, #stored, 2 do h[stored[j]] = stored[j + 1] end
    local base_ms = tonumber(string.match(entry, '^(%d+)-'))
    local parts = {}
    for a = 1, (tonumber(h.attempts) or 0) do
      local earlier = h['a' .. a] and bare(h['a' .. a], base_ms)
      if earlier then parts[#parts + 1] = earlier end
    end
    parts[#parts + 1] = bare(record, base_ms) or ''
    local text = table.concat(parts, ',')
    -- The log entry says how many events were duplicates, not which: then the ids that went are kept.
    local ids = nil
    if h.dup and h.dup ~= '0' and event_ids ~= '' then ids = event_ids end
    if now_ms - base_ms > tonumber(window) * 1000 then
      if ids then text = text .. '\n' .. ids end
      local field = entry
      if destination then field = entry .. '_' .. destination end
      redis.call('HSET', late, field, text)
      redis.call('EXPIREAT', late, late_expiry)
    else
      -- An entry id of sequence 0 (most) is written as its ms alone: a listpack keeps it as an integer.
      local l = string.gsub(entry, '%-0$', '')
      local fields = {'l', l, 'o', text}
      if destination then
        fields[#fields + 1] = 'd'
        fields[#fields + 1] = destination
      end
      if ids then
        fields[#fields + 1] = 'i'
        fields[#fields + 1] = ids
      end
      redis.call('XADD', out, 'MINID', '~', oldest, '*', unpack(fields))
      if not expiring[out] then
        redis.call('EXPIRE', out, retention)
        expiring[out] = true
      end
    end
    return h.chain
  end
  return outcome
end
