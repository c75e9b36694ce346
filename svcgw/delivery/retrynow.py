"""Retry now: a retrying delivery's next attempt, brought forward to this moment.

The attempt is the one the retry schedule had planned, only earlier: it
counts as an attempt like any other (it is numbered, recorded and signed as
one), and if it fails the schedule continues from it, so the following
delay is the schedule's next one, counted from the failure. Retry now never
adds attempts: a delivery still becomes a dead letter after the same number
of failures.

Only a delivery whose state is ``retrying`` and whose next attempt is still
waiting in RQ's scheduled registry can be retried now; a pending delivery
is about to be attempted anyway, a delivered one needs nothing, and a dead
letter is replayed instead (``svcgw dlq replay``). One Lua script
(``svcgw/storage/lua/retry_now.lua``) checks and moves it, so a worker promoting
the same retry at the same moment cannot attempt it twice.

With an ``account``, another account's delivery is treated exactly like one
that does not exist.

Errors::

    RetryNowError
    └── NotRetrying     (also a ValueError) its state is not retrying, or its attempt is under way

and ``svcgw.errors.NotFound`` (``what="delivery"``): no such delivery, or another account's.
"""

from __future__ import annotations

import time

from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import byid
from svcgw.errors import NotFound, SvcgwError
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["NotRetrying", "RetryNowError", "retry_now"]


class RetryNowError(SvcgwError):
    """Base class of this module's errors."""


class NotRetrying(RetryNowError, ValueError):
    """The delivery is not waiting for a retry; the message says what it is doing."""


async def retry_now(
    redis: Redis, keys: KeySpace, settings: Settings, delivery_id: str, *, account: str | None = None
) -> None:
    """Queue the delivery's next attempt at once; ``NotFound`` or ``NotRetrying`` when it cannot be."""
    if not delivery_id or len(delivery_id) > 200:
        raise NotFound("no such delivery", what="delivery")
    queue_key = keys.rq.queue(settings.queue_name)
    script = register(redis, "retry_now")
    outcome = int(
        await script(
            keys=[
                keys.rq.scheduled(settings.queue_name),
                queue_key,
                keys.delivery(delivery_id),
                keys.rq.job(delivery_id),
                keys.rq.queues,
            ],
            args=[delivery_id, account or "", queue_key, repr(time.time())],
        )
    )
    if outcome == 0 and deliveryid.parse_named(delivery_id) is not None:
        # Named by its post and without a record: delivered, if its post and outcome are still kept.
        try:
            await byid.show(redis, keys, settings, delivery_id, account=account)
        except NotFound:
            pass  # not kept any more: not found, below
        else:
            raise NotRetrying(f"delivery {delivery_id} is delivered; only a retrying delivery can be retried now")
    if outcome == 0:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    if outcome == -1:
        state = await redis.hget(keys.delivery(delivery_id), "state")
        # A post's delivery has no state until an attempt ends (svcgw.storage.keys.delivery): pending.
        shown = {"queued": "pending", "": "pending"}.get(_text(state), _text(state))
        raise NotRetrying(f"delivery {delivery_id} is {shown}; only a retrying delivery can be retried now")
    if outcome == -2:
        raise NotRetrying(f"delivery {delivery_id} is being attempted already")


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
