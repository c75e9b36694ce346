"""The delivery queue's scripts, reached from synchronous tests: each call on a client of its own; service events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from redis import Redis as SyncRedis
from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.callbacks.addresses import check_for_service
from svcgw.config.settings import Settings
from svcgw.delivery import failingorigins
from svcgw.delivery.queue import Claimed, DeliveryQueue, Finish
from svcgw.deliveryid import new_delivery_id
from svcgw.liveness import transitions
from svcgw.registry.destinations import DestinationConfig
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import JobTemplate, job_description, job_fields
from tests.conftest import Tenant, provision, with_store
from tests.support import Received
from worker.engine import Engine, loop_factory

T = TypeVar("T")


def with_queue(settings: Settings, action: Callable[[DeliveryQueue], Awaitable[T]]) -> T:
    async def go() -> T:
        client = Redis.from_url(settings.redis_url or "")
        try:
            queue = DeliveryQueue(
                client,
                keys,
                settings.queue_name,
                lease_seconds=settings.lease_seconds,
                failing_argument=failingorigins.script_argument(settings),
                log_retention=settings.log_retention,
            )
            return await action(queue)
        finally:
            await client.aclose()

    return asyncio.run(go())


def claim_batch(settings: Settings, count: int, saturated: Mapping[str, float] | None = None) -> list[Claimed]:
    """Claim up to ``count`` jobs as worker "test"."""
    return with_queue(settings, lambda queue: queue.claim_batch(count, "test", saturated))


def claim(settings: Settings, count: int) -> list[str]:
    """The ids of up to ``count`` jobs claimed as worker "test"."""
    return [c.delivery_id for c in claim_batch(settings, count)]


def finish(settings: Settings, item: Finish) -> bool:
    """End one claim; False if it had been lost meanwhile."""
    (finished,) = with_queue(settings, lambda queue: queue.finish_detailed([item]))
    return finished.held


# --- service events, as the prober makes them ----------------------------------------
def flip(settings: Settings, appid: str, *, offline: bool) -> str:
    """The prober's flip of a started instance, offline or back online; the delivery id of its event."""

    async def go() -> str | None:
        client = Redis.from_url(settings.redis_url or "")
        try:
            if offline:
                return await transitions.go_offline(
                    client, keys, settings, appid, reason="lost", action_required="relogin", detected_at=time.time()
                )
            return await transitions.go_online(client, keys, settings, appid, auto_reconnected=True, at=time.time())
        finally:
            await client.aclose()

    delivery_id = asyncio.run(go())
    assert delivery_id is not None
    return delivery_id


def started(settings: Settings, url: str) -> Tenant:
    tenant = provision(settings, url=url)
    # The first probe an hour away: the instance's flips are the test's own, not the prober's.
    asyncio.run(_mark_started(settings, tenant.appid))
    return tenant


async def _mark_started(settings: Settings, appid: str) -> None:
    client = Redis.from_url(settings.redis_url or "")
    try:
        await transitions.mark_started(client, keys, appid, 3600)
    finally:
        await client.aclose()


def kind(post: Received) -> str:
    return post.headers["x-svc-event-type"]


SinkRule = Callable[[Received, list[Received]], tuple[int, float]]


def failing_first(times: int, event_type: str = "InstanceOffline") -> SinkRule:
    """A sink rule: the first ``times`` posts of ``event_type`` answer 500, everything else 200."""

    def rule(post: Received, earlier: list[Received]) -> tuple[int, float]:
        if kind(post) == event_type and sum(1 for p in earlier if kind(p) == event_type) < times:
            return 500, 0.0
        return 200, 0.0

    return rule


def deliver_all(engine: Engine) -> None:
    """Run ``engine`` as ``svcgw worker --burst`` runs it: on a loop of its own, until nothing is left to deliver."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(engine.serve(asyncio.Event(), burst=True))


# --- further destinations (docs/destinations.md) ----------------------------------------
def add_destination(settings: Settings, scope: Scope, url: str, **values: object) -> DestinationConfig:
    """A further destination saved as the console saves one (its own signing secret, sealed)."""

    async def action(store: Store) -> DestinationConfig:
        return await store.add_destination(scope, check_for_service(url, settings), **values)

    return with_store(settings, action)


def destination_delivery(
    redis: SyncRedis,
    settings: Settings,
    tenant: Tenant,
    destination_id: str,
    primary_id: str,
    body: bytes,
    *,
    event_type: str = "Msg",
    named: bool = False,
) -> str:
    """One delivery of a post to a further destination, written as the ingest script writes it
    (docs/destinations.md): ``named``, with the id the post and the destination give it
    (``<primary>_<16 hex>``), one hash of RQ's lean fields and the delivery's (its destination is
    its id's), queued; else (an appid of the older id form, and any number for one post) a ``dlv_`` delivery
    hash with ``destination`` and ``primary``, its RQ job hash and its place in the queue, as
    ``queue_delivery.lua`` writes a service event's (without the chain)."""
    queue_key = keys.rq.queue(settings.queue_name)
    if named:
        delivery_id = deliveryid.for_destination(primary_id, destination_id) or ""
        assert delivery_id, "a primary named by its post, a destination id of dst_ and 16 hex"
        lean = JobTemplate(settings.queue_name, settings.dead_letter_retention).lean(delivery_id)
        pipe = redis.pipeline(transaction=True)
        pipe.hset(keys.rq.job(delivery_id), mapping=dict(zip(lean[::2], lean[1::2], strict=True)))
        pipe.hset(
            keys.rq.job(delivery_id),
            mapping={
                "appid": tenant.appid,
                "account": tenant.account,
                "event_type": event_type,
                "body": body,
            },
        )
        pipe.rpush(queue_key, delivery_id)
        pipe.sadd(keys.rq.queues, queue_key)
        pipe.execute()
        return delivery_id
    delivery_id = new_delivery_id()
    job = job_fields(
        delivery_id,
        queue_name=settings.queue_name,
        description=job_description(event_type, tenant.appid),
        failure_ttl=settings.dead_letter_retention,
    )
    pipe = redis.pipeline(transaction=True)
    pipe.hset(
        keys.delivery(delivery_id),
        mapping={
            "appid": tenant.appid,
            "account": tenant.account,
            "event_type": event_type,
            "body": body,
            "state": "queued",
            "received_at": repr(time.time()),
            "attempts": 0,
            "failures": 0,
            "events": 1,
            "destination": destination_id,
            "primary": primary_id,
        },
    )
    pipe.hset(keys.rq.job(delivery_id), mapping=job)
    pipe.rpush(queue_key, delivery_id)
    pipe.sadd(keys.rq.queues, queue_key)
    pipe.execute()
    return delivery_id
