"""What a scrape of ``/metrics`` reads of one shard: its counters, queues, dead letters and failing destinations.

``receiver.metrics`` renders it for every shard (:mod:`svcgw.counters` records what it reads).
Everything comes from Redis in one round trip, never from the instances themselves: their
counts by liveness status are kept in step with every change (``svcgw.counters.count_change``),
and computed once from the instances where they are missing, or were computed by an earlier
rule (:func:`rebuild_instance_counts`; the first scrape does it). Each shard counts its own
instances only: shard 0's set of instances lists every shard's (it is the registry), and
``/metrics`` sums the shards.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import breaker, failingorigins
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["COUNTS_SHARD", "REBUILD_ATTEMPTS", "rebuild_instance_counts", "snapshot"]

log = logging.getLogger("svcgw")

# Reads of the set of instances a rebuild makes before it gives up until the next scrape:
# each retry means the set changed (a registration) between a read and the count.
REBUILD_ATTEMPTS = 5
# The field of the instance counts naming the shard whose instances they count (liveness_counts.lua).
COUNTS_SHARD = "shard"


async def rebuild_instance_counts(redis: AsyncRedis, keys: KeySpace, shard: int = 0) -> bool:
    """Compute the instance counts of shard ``shard`` from its instances when they need it; True if this call did.

    They need it when they do not exist, or do not name the shard they count
    (:data:`COUNTS_SHARD`): counts computed before each shard counted its own
    instances counted every shard's on shard 0 of several.

    The set of instances is read first, so that the script is given every
    instance hash it reads as KEYS; the script counts only if the set still
    holds exactly those appids, and only the instances whose hash names
    ``shard`` (none named: shard 0). An instance registered in between makes the call
    read the set again, up to :data:`REBUILD_ATTEMPTS` times; after that the
    counts stay missing (logged) and the next scrape tries again. The
    script goes over every instance, so it blocks Redis for about a
    millisecond per thousand instances, once.
    """
    script = register(redis, "liveness_counts")
    for _ in range(REBUILD_ATTEMPTS):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.metrics_instances, COUNTS_SHARD)
            pipe.smembers(keys.instances)
            built_for, members = await pipe.execute()
        if built_for is not None and _text(built_for) == str(shard):
            return False
        appids = list(members)
        done = int(
            await script(
                keys=[keys.instances, keys.metrics_instances, *(keys.instance(_text(appid)) for appid in appids)],
                args=[repr(time.time()), str(shard), *appids],
            )
        )
        if done >= 0:
            return bool(done)
    log.warning("instance counts not computed: the set of instances kept changing; the next scrape tries again")
    return False


# --- scraping ---------------------------------------------------------------------
def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def snapshot(
    redis: AsyncRedis, keys: KeySpace, queue_name: str, settings: Settings | None = None, *, shard: int = 0
) -> dict[str, Any]:
    """Everything a scrape of shard ``shard`` shows, read from Redis in one round trip (and never from the instances).

    ``settings`` gives the threshold of failing destinations (default settings without it).
    """
    limits = settings or Settings()
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.metrics_counters)
        pipe.hgetall(keys.metrics_latency)
        pipe.llen(keys.rq.queue(queue_name))
        pipe.zcard(keys.inflight(queue_name))
        pipe.zcard(keys.rq.scheduled(queue_name))
        # Dead letters: the failed registry's members scored after now (svcgw.storage.rqformat.failed_live).
        pipe.zcount(keys.rq.failed(queue_name), f"({now}", "+inf")
        pipe.hgetall(keys.metrics_instances)
        pipe.hgetall(keys.failing_origins)
        pipe.hgetall(keys.breakers)
        counters, latency, queued, inflight, scheduled, dead, instances, destinations, probed = await pipe.execute()
    built_for = instances.get(COUNTS_SHARD.encode(), instances.get(COUNTS_SHARD))
    if built_for is None or _text(built_for) != str(shard):
        await rebuild_instance_counts(redis, keys, shard)
        instances = await redis.hgetall(keys.metrics_instances)
    statuses: dict[str, int] = {}
    probe_errors = 0
    for name, value in instances.items():
        field = _text(name)
        if field.startswith("status|") and int(value) > 0:
            statuses[field[len("status|") :]] = int(value)
        elif field == "probe_errors":
            probe_errors = max(int(value), 0)
    return {
        "counters": {_text(k): float(v) for k, v in counters.items()},
        "latency": {_text(k): float(v) for k, v in latency.items()},
        "queue": {"queued": int(queued), "inflight": int(inflight), "scheduled": int(scheduled)},
        "dead": int(dead),
        "instances": statuses,
        "probe_errors": probe_errors,
        "failing_destinations": _failing_count(destinations, limits, now),
        "probing_destinations": _probing_count(probed, limits, now),
    }


def _failing_count(destinations: dict[Any, Any], settings: Settings, now: float) -> int:
    count = 0
    for name, value in destinations.items():
        record = failingorigins.parse(_text(name), value)
        if record is not None and failingorigins.is_failing(record, settings, now):
            count += 1
    return count


def _probing_count(destinations: dict[Any, Any], settings: Settings, now: float) -> int:
    records = {_text(name): breaker.parse(_text(name), value) for name, value in destinations.items()}
    found = {name: [record] for name, record in records.items() if record is not None}
    return len(breaker.current(found, settings, now))
