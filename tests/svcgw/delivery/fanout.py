"""Deliveries to further destinations written as the data model has them (docs/destinations.md), for the readers' tests.

:func:`fan_out` adds to a post already ingested what the ingest script writes when the post also goes
to further destinations: per destination a delivery, its id in the destination's index, and the field
``f`` on the post's log entry. ``named`` (what the script writes for an appid whose ids are named by
their posts): ids ``<primary>_<16 hex>``, one hash each of RQ's lean fields and the delivery's (its
destination is its id's), ``f`` the destination ids; else (an appid of the older form) a ``dlv_`` delivery
each (its hash, with ``destination`` and ``primary``, its RQ job), ``f`` pairs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import cast

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.queue import Finish
from svcgw.intake.ingest import Ingest, IngestResult
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import JobTemplate, exc_info_field, failed_score, job_description, job_fields
from tests.conftest import Tenant
from tests.worker.support import claim_batch, finish

__all__ = ["fan_out", "index_only", "ingest_fanned", "kill_among"]


def ingest_fanned(
    settings: Settings, tenant: Tenant, body: bytes, destinations: Sequence[str]
) -> tuple[str, list[str]]:
    """One post through the receiver's own ingest, taken by ``destinations`` (as the routing records would
    give them): the primary's delivery id, and its further destinations' in that order."""

    class Routed:
        async def targets(self, appid: str, event_type: str) -> list[str]:
            return list(destinations)

    async def run() -> IngestResult:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await Ingest(client, keys, settings, targets=Routed()).accept(
                tenant.appid, tenant.receiver_token, body
            )
        finally:
            await client.aclose()

    result = asyncio.run(run())
    assert result.delivery_id is not None
    assert [to for _, to in result.destination_deliveries] == list(destinations)
    return result.delivery_id, [delivery_id for delivery_id, _ in result.destination_deliveries]


def fan_out(settings: Settings, primary: str, destinations: Sequence[str], *, named: bool = False) -> list[str]:
    """The ids of the deliveries of the post of ``primary`` (a delivery just ingested) to ``destinations``."""
    parsed = deliveryid.parse(primary)
    assert parsed is not None, "a delivery named by its post"
    appid, entry = parsed
    redis = Redis.from_url(settings.redis_url or "")
    try:
        stored = redis.hgetall(keys.delivery(primary))
        assert stored, "the primary's delivery not yet attempted"
        log = keys.callback_log(appid)
        rows = redis.xrange(log)
        if named:
            ids = [deliveryid.for_destination(primary, destination) or "" for destination in destinations]
            assert all(ids), "destination ids of dst_ and 16 hex"
        else:
            ids = [deliveryid.new_delivery_id() for _ in destinations]
        received_ms = deliveryid.entry_ms(entry)
        queue = keys.rq.queue(settings.queue_name)
        template = JobTemplate(settings.queue_name, settings.dead_letter_retention)
        with redis.pipeline(transaction=True) as pipe:
            for delivery_id, destination in zip(ids, destinations, strict=True):
                if named:
                    lean = template.lean(delivery_id)
                    pipe.hset(keys.rq.job(delivery_id), mapping=dict(zip(lean[::2], lean[1::2], strict=True)))
                    pipe.hset(
                        keys.rq.job(delivery_id),
                        mapping={
                            "appid": appid,
                            "account": stored[b"account"],
                            "event_type": stored[b"event_type"],
                            "body": stored[b"body"],
                        },
                    )
                    pipe.rpush(queue, delivery_id)
                    pipe.sadd(keys.rq.queues, queue)
                    # Its index entry names the primary: its own id follows from it and the destination's.
                    pipe.xadd(keys.destination_deliveries(destination), {"d": primary})
                    continue
                pipe.hset(
                    keys.delivery(delivery_id),
                    mapping={
                        "appid": appid,
                        "account": stored[b"account"],
                        "event_type": stored[b"event_type"],
                        "body": stored[b"body"],
                        "state": "queued",
                        "received_at": repr(received_ms / 1000),
                        "attempts": 0,
                        "failures": 0,
                        "events": 1,
                        "destination": destination,
                        "primary": primary,
                    },
                )
                event_type = stored[b"event_type"].decode()
                job = job_fields(
                    delivery_id,
                    queue_name=settings.queue_name,
                    description=job_description(event_type, appid),
                    failure_ttl=settings.dead_letter_retention,
                )
                pipe.hset(keys.rq.job(delivery_id), mapping=job)
                pipe.rpush(queue, delivery_id)
                pipe.sadd(keys.rq.queues, queue)
                pipe.xadd(keys.destination_deliveries(destination), {"d": delivery_id})
            # An entry's fields cannot change: the log is written again, the post's entry with its field f.
            pipe.delete(log)
            if named:
                pairs = " ".join(destinations).encode()
            else:
                pairs = " ".join(f"{d}:{dst}" for d, dst in zip(ids, destinations, strict=True)).encode()
            for entry_id, fields in cast(list[tuple[bytes, dict[bytes, bytes]]], rows):
                written = {**fields, b"f": pairs} if entry_id.decode() == entry else fields
                pipe.xadd(log, written, id=entry_id)
            pipe.expire(log, settings.log_retention)
            pipe.execute()
    finally:
        redis.close()
    return ids


def index_only(settings: Settings, destination: str, delivery_id: str, *, received: float | None = None) -> None:
    """An id in the destination's index alone (its delivery's record gone, as once expired); ``received``: the
    entry's time (above the index's last entry)."""
    redis = Redis.from_url(settings.redis_url or "")
    try:
        at = "*" if received is None else f"{int(received * 1000)}-*"
        redis.xadd(keys.destination_deliveries(destination), {"d": delivery_id}, id=at)
    finally:
        redis.close()


def kill_among(settings: Settings, delivery_id: str, appid: str, queued: int, *, died_at: float | None = None) -> None:
    """``delivery_id``, among the ``queued`` jobs at the queue's head (all claimed), made a dead letter through the
    queue's own scripts, as the engine would."""
    assert delivery_id in [c.delivery_id for c in claim_batch(settings, queued)]
    moment = time.time() if died_at is None else died_at
    attempt = Attempt(ok=False, at=moment, duration=0.01, status=500, error="HTTP 500", destination="x")
    dead = Finish(
        delivery_id,
        appid,
        "dead",
        attempt.record(1),
        due=failed_score(moment, settings.dead_letter_retention),
        retention=settings.dead_letter_retention,
        error=exc_info_field("HTTP 500"),
    )
    assert finish(settings, dead)
