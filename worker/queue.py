"""The delivery queue: claiming, leasing, scheduling and finishing RQ jobs.

Each transition is one Lua script, so it is atomic however many workers run
and costs one round trip. The keys are RQ's own where RQ has one:

* ``rq:queue:<q>``: ready jobs, oldest first;
* ``rq:scheduled:<q>``: retries, scored by due time (RQ's scheduled registry);
* ``rq:failed:<q>``: dead letters, scored by expiry (RQ's failed registry);
* ``svcgw:inflight:<q>``: claimed jobs, scored by lease expiry. A worker
  extends the leases of what it holds; a lease that runs out (the worker was
  killed) puts the job back at the front of the queue. Delivery is
  therefore at least once.

The scripts touch job and delivery hashes named from ids, so they need a
single Redis (or Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from redis import Redis

from svcgw import keys

__all__ = ["DeliveryQueue", "Outcome"]

Outcome = Literal["delivered", "retry", "dead"]

_JOB_PREFIX = "rq:job:"

_CLAIM = """
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {} end
local claimed = {}
for _, id in ipairs(ids) do
  local job = ARGV[5] .. id
  if redis.call('EXISTS', job) == 1 then
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    redis.call('HSET', job, 'status', 'started', 'started_at', ARGV[4], 'worker_name', ARGV[3])
    claimed[#claimed + 1] = id
  end
end
return claimed
"""

# Moves due members of a sorted set (scheduled retries, or expired leases) to
# the queue. ARGV[4] = 'front' puts them first: a job whose worker died has
# waited longest.
_PROMOTE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  if ARGV[4] == 'front' then
    redis.call('LPUSH', KEYS[2], id)
  else
    redis.call('RPUSH', KEYS[2], id)
  end
  redis.call('HSET', ARGV[3] .. id, 'status', 'queued')
end
local following = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#ids, following[2] or false}
"""

# KEYS: inflight, delivery, attempts, job, scheduled, failed, dead index, queue
# ARGV: outcome, id, attempt record, now, next due (retry) / expiry (dead),
#       ttl of the delivery record, error text (zlib), rq ended_at
_FINISH = """
local id = ARGV[2]
local claimed = redis.call('ZREM', KEYS[1], id)
redis.call('RPUSH', KEYS[3], ARGV[3])
redis.call('HINCRBY', KEYS[2], 'attempts', 1)
local outcome = ARGV[1]
if outcome == 'delivered' then
  redis.call('HSET', KEYS[2], 'state', 'delivered', 'delivered_at', ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[6])
  redis.call('DEL', KEYS[4])
  if claimed == 0 then
    -- Our lease ran out and the job was handed back; it is done now.
    redis.call('LREM', KEYS[8], 0, id)
    redis.call('ZREM', KEYS[5], id)
  end
  return claimed
end
redis.call('HINCRBY', KEYS[2], 'failures', 1)
if claimed == 0 then
  -- Another copy of this job is queued or running; it owns what comes next.
  return 0
end
if outcome == 'retry' then
  redis.call('HSET', KEYS[2], 'state', 'retrying', 'next_at', ARGV[5])
  redis.call('ZADD', KEYS[5], ARGV[5], id)
  redis.call('HSET', KEYS[4], 'status', 'scheduled')
else
  redis.call('HSET', KEYS[2], 'state', 'dead', 'dead_at', ARGV[4])
  redis.call('HDEL', KEYS[2], 'next_at')
  redis.call('ZADD', KEYS[6], ARGV[5], id)
  redis.call('HSET', KEYS[4], 'status', 'failed', 'exc_info', ARGV[7], 'ended_at', ARGV[8])
  redis.call('EXPIRE', KEYS[4], ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[6])
  redis.call('SADD', KEYS[7], id)
  redis.call('EXPIRE', KEYS[7], ARGV[6])
end
return 1
"""

_DEFER = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[3], 'status', 'scheduled')
  return 1
end
return 0
"""

_RELEASE = """
local released = 0
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('LPUSH', KEYS[2], id)
    redis.call('HSET', 'rq:job:' .. id, 'status', 'queued')
    released = released + 1
  end
end
return released
"""

# KEYS: failed, queue, delivery, attempts, job, dead index, rq:queues
# ARGV: id, failures that exhaust the schedule, queue key
_REPLAY = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[5]) == 0 or redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
redis.call('HSET', KEYS[3], 'state', 'queued', 'failures', ARGV[2])
redis.call('PERSIST', KEYS[3])
redis.call('PERSIST', KEYS[4])
redis.call('PERSIST', KEYS[5])
redis.call('HSET', KEYS[5], 'status', 'queued')
redis.call('HDEL', KEYS[5], 'exc_info', 'ended_at')
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('SADD', KEYS[7], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
"""


@dataclass(frozen=True)
class Promotion:
    moved: int
    next_due: float | None


class DeliveryQueue:
    def __init__(self, redis: Redis, queue_name: str, *, lease_seconds: float = 30.0) -> None:
        self.redis = redis
        self.name = queue_name
        self.lease_seconds = lease_seconds
        self.queue_key = keys.rq_queue(queue_name)
        self.inflight_key = keys.inflight(queue_name)
        self.scheduled_key = keys.rq_scheduled(queue_name)
        self.failed_key = keys.rq_failed(queue_name)
        self._claim = redis.register_script(_CLAIM)
        self._promote = redis.register_script(_PROMOTE)
        self._finish = redis.register_script(_FINISH)
        self._defer = redis.register_script(_DEFER)
        self._release = redis.register_script(_RELEASE)
        self._replay = redis.register_script(_REPLAY)

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

    def claim(self, count: int, worker_name: str) -> list[str]:
        if count <= 0:
            return []
        now = time.time()
        ids = self._claim(
            keys=[self.queue_key, self.inflight_key],
            args=[count, now + self.lease_seconds, worker_name, _rq_now(), _JOB_PREFIX],
        )
        return [i.decode() if isinstance(i, bytes) else str(i) for i in cast(list[bytes], ids)]

    def extend(self, ids: Sequence[str]) -> None:
        if ids:
            until = time.time() + self.lease_seconds
            self.redis.zadd(self.inflight_key, dict.fromkeys(ids, until), xx=True)

    def promote_due(self, limit: int = 1000) -> Promotion:
        """Move retries that are due into the queue; returns how many and when the next is due."""
        return self._move(self.scheduled_key, limit, front=False)

    def reclaim_expired(self, limit: int = 1000) -> Promotion:
        """Hand back jobs whose worker stopped extending its lease."""
        return self._move(self.inflight_key, limit, front=True)

    def _move(self, source: str, limit: int, *, front: bool) -> Promotion:
        moved, following = cast(
            list[object],
            self._promote(
                keys=[source, self.queue_key],
                args=[time.time(), limit, _JOB_PREFIX, "front" if front else "back"],
            ),
        )
        next_due = float(cast(bytes, following)) if following else None
        return Promotion(int(cast(int, moved)), next_due)

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
        now = time.time()
        result = self._finish(
            keys=[
                self.inflight_key,
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.rq_job(delivery_id),
                self.scheduled_key,
                self.failed_key,
                keys.dead_letters_by_appid(appid),
                self.queue_key,
            ],
            args=[
                outcome, delivery_id, attempt, now, "" if due is None else due, retention, error, _rq_now()
            ],
        )
        return bool(result)

    def defer(self, delivery_id: str, seconds: float) -> bool:
        """Give a claimed job back for later without counting an attempt."""
        result = self._defer(
            keys=[self.inflight_key, self.scheduled_key, keys.rq_job(delivery_id)],
            args=[delivery_id, time.time() + seconds],
        )
        return bool(result)

    def release(self, ids: Sequence[str]) -> int:
        """Hand claimed jobs back to the front of the queue (shutdown)."""
        if not ids:
            return 0
        return int(cast(int, self._release(keys=[self.inflight_key, self.queue_key], args=list(ids))))

    def replay(self, delivery_id: str, appid: str, exhausted_failures: int) -> int:
        """Move a dead letter back to the queue for one fresh attempt.

        Returns 1 if replayed, 0 if it is not a dead letter, -1 if its data expired.
        """
        return int(
            cast(
                int,
                self._replay(
                    keys=[
                        self.failed_key,
                        self.queue_key,
                        keys.delivery(delivery_id),
                        keys.delivery_attempts(delivery_id),
                        keys.rq_job(delivery_id),
                        keys.dead_letters_by_appid(appid),
                        keys.RQ_QUEUES,
                    ],
                    args=[delivery_id, exhausted_failures, self.queue_key],
                ),
            )
        )

    def depth(self) -> dict[str, int]:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.queue_key)
            pipe.zcard(self.inflight_key)
            pipe.zcard(self.scheduled_key)
            pipe.zcount(self.failed_key, time.time(), "+inf")
            queued, inflight, scheduled, failed = pipe.execute()
        return {"queued": queued, "inflight": inflight, "scheduled": scheduled, "dead": failed}


def _rq_now() -> str:
    from datetime import UTC, datetime

    from rq.utils import utcformat

    return utcformat(datetime.now(UTC).replace(tzinfo=None))
