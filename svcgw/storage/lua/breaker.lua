-- Destinations being probed (svcgw.delivery.breaker): an attempt's outcome moves the attempts in
-- flight its destination is allowed. Prepended to queue_finish.lua.
-- KEYS, ARGV: none of its own; probe_outcome takes the probing hash and the values from its caller.
-- A record is 'limit:since:at:word:opened' (word t: timed out, a: answered, o: open again), its field
-- one account's destination ('<account> <origin>', svcgw.delivery.breaker.name): another account's
-- attempts to the same origin never move it.
-- probe_outcome(hash, destination, mark, now, cap, floor): destination the record's field; mark 't:<when the attempt started>' for
-- an attempt that timed out, 'a' for one that got an answer (sent only while the worker holds the
-- destination probed), '' for nothing. Returns 16 when the record changed, plus 32 for the first
-- answer after timeouts (the worker brings the destination's held-back jobs forward), 64 when
-- its probing began, 128 when it is back at its caps (one log record each, whatever the workers).
local function probe_outcome(hash, destination, mark, now, cap, floor)
  if destination == '' or mark == '' then return 0 end
  local held = redis.call('HGET', hash, destination)
  local limit, since, word, opened
  if held then
    local l, s, _, w, o = string.match(held, '^(%d+):([^:]*):([^:]*):(%a):([^:]*)$')
    limit, since, word, opened = tonumber(l), s, w, tonumber(o)
  end
  if string.sub(mark, 1, 1) == 't' then
    local started = tonumber(string.sub(mark, 3)) or tonumber(now)
    local bits = 16
    if not limit or word == 'o' then
      if limit and opened and started < opened then return 0 end
      -- At its caps until now: probing starts with this timeout.
      limit, since, bits = cap, now, 16 + 64
    elseif word == 'a' and opened and started < opened then
      -- An attempt older than the answer that reopened the destination: old news.
      return 0
    end
    limit = math.max(floor, math.floor(limit / 2))
    redis.call('HSET', hash, destination, string.format('%d:%s:%s:t:', limit, since, now))
    return bits
  end
  if not limit or word == 'o' then return 0 end
  local bits = 16
  if word == 't' or not opened then opened = now end
  if word == 't' then bits = bits + 32 end
  limit = limit + 1
  if limit >= cap then
    bits = bits + 128
    redis.call('HSET', hash, destination, string.format('%d:%s:%s:o:%s', cap, since, now, opened))
  else
    redis.call('HSET', hash, destination, string.format('%d:%s:%s:a:%s', limit, since, now, opened))
  end
  return bits
end
