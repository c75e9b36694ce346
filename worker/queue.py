"""The delivery queue: claiming, leasing, scheduling and finishing RQ jobs.

Each transition is one Lua script, so it is atomic however many workers run
and costs one round trip; the engine's scripts work on a batch of jobs at a
time. The keys are RQ's own where RQ has one:

* ``rq:queue:<q>``: ready jobs, oldest first;
* ``rq:scheduled:<q>``: retries, scored by due time (RQ's scheduled registry);
* ``rq:failed:<q>``: dead letters, scored by expiry (RQ's failed registry);
* ``svcgw:inflight:<q>``: claimed jobs, scored by lease expiry. A worker
  extends the leases of what it holds; a lease that runs out (the worker was
  killed) puts the job back at the front of the queue. Delivery is
  therefore at least once.

The job hash (``rq:job:<id>``) keeps RQ's ``status`` current (queued,
started, scheduled, failed with ``exc_info``) so that rq-dashboard and
``rq requeue`` work on deliveries; a delivered job's hash is deleted, as RQ
does with ``result_ttl=0``.

A claim returns what the attempt needs along with the id: the delivery's
fields and the callback configuration of its instance (and of its account
when the instance has no address of its own), read in the same script.

:class:`DeliveryQueue` takes a synchronous client (the CLI, tests);
:class:`AsyncDeliveryQueue` takes a ``redis.asyncio`` client (the engine).
Both run the same scripts. The scripts touch job and delivery hashes named
from ids, so they need a single Redis (or Sentinel-managed primary), not
Redis Cluster.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from rq.utils import utcformat

from svcgw import keys

__all__ = [
    "DELIVERY_FIELDS",
    "AsyncDeliveryQueue",
    "Claimed",
    "DeliveryQueue",
    "Finish",
    "Outcome",
    "Promotion",
]

Outcome = Literal["delivered", "retry", "dead"]
# Besides an attempt's outcome, a claim can end in ``defer`` (back to the
# scheduled registry without an attempt) or ``drop`` (the delivery's data expired).
FinishKind = Literal["delivered", "retry", "dead", "defer", "drop"]

# The delivery hash fields an attempt reads.
DELIVERY_FIELDS = ("appid", "account", "event_type", "body", "failures", "state", "attempts", "received_at")

# KEYS: queue, inflight, scheduled
# ARGV: count, lease until, worker name, rq now, job prefix, delivery prefix,
#       instance callback prefix, account callback prefix, number of
#       delivery fields, delivery fields..., then pairs of a saturated
#       destination host and the time its jobs are due again
_CLAIM = """
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {} end
local nfields = tonumber(ARGV[9])
local fields = {}
for f = 10, 9 + nfields do fields[#fields + 1] = ARGV[f] end
local saturated = {}
for s = 10 + nfields, #ARGV, 2 do saturated[ARGV[s]] = ARGV[s + 1] end
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
  local data = redis.call('HMGET', ARGV[6] .. id, unpack(fields))
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
  if later then
    -- Its destination has no free slot in this worker: back to the
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
"""

# Moves due members of a sorted set (scheduled retries, or expired leases) to
# the queue. ARGV[4] = 'front' puts them first: a job whose worker died has
# waited longest.
_PROMOTE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local push = 'RPUSH'
if ARGV[4] == 'front' then push = 'LPUSH' end
for start = 1, #ids, 500 do
  local chunk = {unpack(ids, start, math.min(start + 499, #ids))}
  redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call(push, KEYS[2], unpack(chunk))
end
for _, id in ipairs(ids) do
  redis.call('HSET', ARGV[3] .. id, 'status', 'queued')
end
local following = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#ids, following[2] or false}
"""

# KEYS: inflight, scheduled, failed, queue
# ARGV: now, rq ended_at, then 10 per job: kind, id, delivery key, attempts
#       key, job key, dead index key, attempt record, due (retry, defer) or
#       expiry (dead), ttl of the delivery record, error text (zlib)
# Returns 1 per job whose claim was still ours, else 0.
_FINISH = """
local n = (#ARGV - 2) / 10
if n < 1 then return {} end
local ids = {}
for i = 0, n - 1 do ids[#ids + 1] = ARGV[4 + i * 10] end
local held = redis.call('ZMSCORE', KEYS[1], unpack(ids))
redis.call('ZREM', KEYS[1], unpack(ids))
local now = ARGV[1]
local results = {}
for i = 0, n - 1 do
  local b = 3 + i * 10
  local kind, id = ARGV[b], ARGV[b + 1]
  local delivery, attempts, job, dead = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local record, due, ttl = ARGV[b + 6], ARGV[b + 7], ARGV[b + 8]
  local claimed = 0
  if held[i + 1] then claimed = 1 end
  if kind == 'delivered' then
    local count = redis.call('RPUSH', attempts, record)
    redis.call('HSET', delivery, 'state', 'delivered', 'delivered_at', now, 'attempts', count)
    redis.call('EXPIRE', delivery, ttl)
    redis.call('EXPIRE', attempts, ttl)
    redis.call('DEL', job)
    if claimed == 0 then
      -- Our lease ran out and the job was handed back; it is done now.
      redis.call('LREM', KEYS[4], 0, id)
      redis.call('ZREM', KEYS[2], id)
    end
  elseif kind == 'retry' or kind == 'dead' then
    local count = redis.call('RPUSH', attempts, record)
    redis.call('HINCRBY', delivery, 'failures', 1)
    if claimed == 0 then
      -- Another copy of this job is queued or running; it owns what comes next.
      redis.call('HSET', delivery, 'attempts', count)
    elseif kind == 'retry' then
      redis.call('HSET', delivery, 'attempts', count, 'state', 'retrying', 'next_at', due)
      redis.call('ZADD', KEYS[2], due, id)
      redis.call('HSET', job, 'status', 'scheduled')
    else
      redis.call('HSET', delivery, 'attempts', count, 'state', 'dead', 'dead_at', now)
      redis.call('HDEL', delivery, 'next_at')
      redis.call('ZADD', KEYS[3], due, id)
      redis.call('HSET', job, 'status', 'failed', 'exc_info', ARGV[b + 9], 'ended_at', ARGV[2])
      redis.call('EXPIRE', job, ttl)
      redis.call('EXPIRE', delivery, ttl)
      redis.call('EXPIRE', attempts, ttl)
      redis.call('SADD', dead, id)
      redis.call('EXPIRE', dead, ttl)
    end
  elseif kind == 'defer' then
    if claimed == 1 then
      redis.call('ZADD', KEYS[2], due, id)
      redis.call('HSET', job, 'status', 'scheduled')
    end
  elseif kind == 'drop' then
    redis.call('DEL', job)
  end
  results[i + 1] = claimed
end
return results
"""

# KEYS: inflight, queue
# ARGV: job prefix, ids...
_RELEASE = """
local released = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('LPUSH', KEYS[2], id)
    redis.call('HSET', ARGV[1] .. id, 'status', 'queued')
    released = released + 1
  end
end
return released
"""

@dataclass(frozen=True)
class Promotion:
    moved: int
    next_due: float | None


@dataclass(frozen=True)
class Claimed:
    """A claimed job with what its attempt needs, as read at claim time."""

    delivery_id: str
    fields: dict[str, bytes | None]  # DELIVERY_FIELDS; None where missing
    own: dict[str, str]  # the instance's callback configuration
    default: dict[str, str]  # the account's, read only when the instance has no address


@dataclass(frozen=True)
class Finish:
    """How one claim ends; ``record`` is the attempt's JSON record (none for defer and drop)."""

    delivery_id: str
    appid: str
    kind: FinishKind
    record: bytes = b""
    due: float | None = None  # retry and defer: when; dead: when the dead letter expires
    retention: int = 0  # seconds the delivery record is kept from now
    error: bytes = b""  # dead: RQ's exc_info (zlib)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


def _claimed(rows: Any) -> list[Claimed]:
    result: list[Claimed] = []
    for delivery_id, values, own, default in cast(list[list[Any]], rows):
        data = dict(zip(DELIVERY_FIELDS, values, strict=True))
        result.append(Claimed(_text(delivery_id), data, _pairs(own), _pairs(default)))
    return result


def _promotion(answer: Any) -> Promotion:
    moved, following = cast(list[Any], answer)
    return Promotion(int(moved), float(following) if following else None)


class _Scripts:
    """Key names and script arguments shared by the synchronous and asyncio queues."""

    def __init__(self, queue_name: str, lease_seconds: float) -> None:
        self.name = queue_name
        self.lease_seconds = lease_seconds
        self.queue_key = keys.rq_queue(queue_name)
        self.inflight_key = keys.inflight(queue_name)
        self.scheduled_key = keys.rq_scheduled(queue_name)
        self.failed_key = keys.rq_failed(queue_name)

    def claim_args(
        self, count: int, worker_name: str, saturated: Mapping[str, float]
    ) -> tuple[list[str], list[Any]]:
        args: list[Any] = [
            count,
            time.time() + self.lease_seconds,
            worker_name,
            rq_now(),
            keys.rq_job(""),
            keys.delivery(""),
            keys.callback_instance(""),
            keys.callback_account(""),
            len(DELIVERY_FIELDS),
            *DELIVERY_FIELDS,
        ]
        for host, due in saturated.items():
            args.extend((host, repr(due)))
        return [self.queue_key, self.inflight_key, self.scheduled_key], args

    def move_args(self, source: str, limit: int, *, front: bool) -> tuple[list[str], list[Any]]:
        return [source, self.queue_key], [time.time(), limit, keys.rq_job(""), "front" if front else "back"]

    def finish_args(self, items: Sequence[Finish]) -> tuple[list[str], list[Any]]:
        args: list[Any] = [time.time(), rq_now()]
        for item in items:
            args.extend(
                (
                    item.kind,
                    item.delivery_id,
                    keys.delivery(item.delivery_id),
                    keys.delivery_attempts(item.delivery_id),
                    keys.rq_job(item.delivery_id),
                    keys.dead_letters_by_appid(item.appid),
                    item.record,
                    "" if item.due is None else repr(item.due),
                    item.retention,
                    item.error,
                )
            )
        return [self.inflight_key, self.scheduled_key, self.failed_key, self.queue_key], args


class DeliveryQueue(_Scripts):
    """The queue through a synchronous client."""

    def __init__(self, redis: Redis, queue_name: str, *, lease_seconds: float = 30.0) -> None:
        super().__init__(queue_name, lease_seconds)
        self.redis = redis
        self._claim = redis.register_script(_CLAIM)
        self._promote = redis.register_script(_PROMOTE)
        self._finish = redis.register_script(_FINISH)
        self._release = redis.register_script(_RELEASE)

    def wait(self, timeout: float) -> bool:
        """Block until the queue is non-empty or ``timeout`` passes, without taking anything.

        BLMOVE from the queue's head to its own head changes nothing but wakes
        up as soon as a job arrives.
        """
        # Redis takes fractional timeouts for blocking commands; the stub says int.
        result = self.redis.blmove(
            self.queue_key, self.queue_key, max(timeout, 0.01), "LEFT", "LEFT"  # type: ignore[arg-type]
        )
        return result is not None

    def claim_batch(self, count: int, worker_name: str, saturated: Mapping[str, float] | None = None) -> list[Claimed]:
        """Claim up to ``count`` jobs with their data.

        ``saturated`` maps destination hosts (``urlsplit(url).netloc``,
        lower case) that have no free slot to when their jobs are due again:
        those go back to the scheduled registry instead of being claimed.
        """
        if count <= 0:
            return []
        script_keys, args = self.claim_args(count, worker_name, saturated or {})
        return _claimed(self._claim(keys=script_keys, args=args))

    def claim(self, count: int, worker_name: str) -> list[str]:
        return [c.delivery_id for c in self.claim_batch(count, worker_name)]

    def extend(self, ids: Sequence[str]) -> None:
        if ids:
            self.redis.zadd(self.inflight_key, dict.fromkeys(ids, time.time() + self.lease_seconds), xx=True)

    def promote_due(self, limit: int = 1000) -> Promotion:
        """Move retries that are due into the queue; returns how many and when the next is due."""
        script_keys, args = self.move_args(self.scheduled_key, limit, front=False)
        return _promotion(self._promote(keys=script_keys, args=args))

    def reclaim_expired(self, limit: int = 1000) -> Promotion:
        """Hand back jobs whose worker stopped extending its lease."""
        script_keys, args = self.move_args(self.inflight_key, limit, front=True)
        return _promotion(self._promote(keys=script_keys, args=args))

    def finish_many(self, items: Sequence[Finish]) -> list[bool]:
        """End claims; for each, False if the claim had been lost meanwhile (the lease ran out)."""
        if not items:
            return []
        script_keys, args = self.finish_args(items)
        return [bool(x) for x in cast(list[int], self._finish(keys=script_keys, args=args))]

    def finish(
        self,
        delivery_id: str,
        appid: str,
        outcome: Outcome,
        attempt: bytes,
        *,
        due: float | None = None,
        retention: int,
        error: bytes = b"",
    ) -> bool:
        """Record an attempt and move the job on; False if our claim had been lost meanwhile."""
        (held,) = self.finish_many([Finish(delivery_id, appid, outcome, attempt, due, retention, error)])
        return held

    def defer(self, delivery_id: str, seconds: float) -> bool:
        """Give a claimed job back for later without counting an attempt."""
        (held,) = self.finish_many([Finish(delivery_id, "", "defer", due=time.time() + seconds)])
        return held

    def release(self, ids: Sequence[str]) -> int:
        """Hand claimed jobs back to the front of the queue (shutdown)."""
        if not ids:
            return 0
        answer = self._release(keys=[self.inflight_key, self.queue_key], args=[keys.rq_job(""), *ids])
        return int(cast(int, answer))

    def depth(self) -> dict[str, int]:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.queue_key)
            pipe.zcard(self.inflight_key)
            pipe.zcard(self.scheduled_key)
            pipe.zcount(self.failed_key, time.time(), "+inf")
            queued, inflight, scheduled, failed = pipe.execute()
        return {"queued": queued, "inflight": inflight, "scheduled": scheduled, "dead": failed}


class AsyncDeliveryQueue(_Scripts):
    """The queue through a ``redis.asyncio`` client (bytes, not decoded)."""

    def __init__(self, redis: AsyncRedis, queue_name: str, *, lease_seconds: float = 30.0) -> None:
        super().__init__(queue_name, lease_seconds)
        self.redis = redis
        self._claim = redis.register_script(_CLAIM)
        self._promote = redis.register_script(_PROMOTE)
        self._finish = redis.register_script(_FINISH)
        self._release = redis.register_script(_RELEASE)

    async def wait(self, timeout: float) -> bool:
        """Block until the queue is non-empty or ``timeout`` passes (see :meth:`DeliveryQueue.wait`)."""
        result = await self.redis.blmove(
            self.queue_key, self.queue_key, max(timeout, 0.01), "LEFT", "LEFT"  # type: ignore[arg-type]
        )
        return result is not None

    async def claim_batch(
        self, count: int, worker_name: str, saturated: Mapping[str, float] | None = None
    ) -> list[Claimed]:
        """See :meth:`DeliveryQueue.claim_batch`."""
        if count <= 0:
            return []
        script_keys, args = self.claim_args(count, worker_name, saturated or {})
        return _claimed(await self._claim(keys=script_keys, args=args))

    async def extend(self, ids: Sequence[str]) -> None:
        if ids:
            await self.redis.zadd(self.inflight_key, dict.fromkeys(ids, time.time() + self.lease_seconds), xx=True)

    async def promote_due(self, limit: int = 1000) -> Promotion:
        script_keys, args = self.move_args(self.scheduled_key, limit, front=False)
        return _promotion(await self._promote(keys=script_keys, args=args))

    async def reclaim_expired(self, limit: int = 1000) -> Promotion:
        script_keys, args = self.move_args(self.inflight_key, limit, front=True)
        return _promotion(await self._promote(keys=script_keys, args=args))

    async def finish_many(self, items: Sequence[Finish]) -> list[bool]:
        if not items:
            return []
        script_keys, args = self.finish_args(items)
        return [bool(x) for x in cast(list[int], await self._finish(keys=script_keys, args=args))]

    async def release(self, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        answer = await self._release(keys=[self.inflight_key, self.queue_key], args=[keys.rq_job(""), *ids])
        return int(cast(int, answer))

    async def pending(self) -> bool:
        """Whether anything is queued, claimed or scheduled."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.queue_key)
            pipe.zcard(self.inflight_key)
            pipe.zcard(self.scheduled_key)
            counts = await pipe.execute()
        return any(int(c) for c in counts)


def rq_now() -> str:
    """Now, as RQ writes times into a job hash."""
    return utcformat(datetime.now(UTC).replace(tzinfo=None))
