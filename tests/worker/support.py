"""The delivery queue's scripts, reached from synchronous tests: each call on a client of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from redis.asyncio import Redis

from svcgw import failing
from svcgw.settings import Settings
from worker.queue import Claimed, DeliveryQueue, Finish

T = TypeVar("T")


def with_queue(settings: Settings, action: Callable[[DeliveryQueue], Awaitable[T]]) -> T:
    async def go() -> T:
        client = Redis.from_url(settings.redis_url or "")
        try:
            queue = DeliveryQueue(
                client,
                settings.queue_name,
                lease_seconds=settings.lease_seconds,
                failing_argument=failing.script_argument(settings),
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
    (held,) = with_queue(settings, lambda queue: queue.finish_many([item]))
    return held
