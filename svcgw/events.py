"""The service's own events: ``InstanceOffline`` and ``InstanceRecovered``.

Building is kept apart from queueing. ``instance_offline`` and
``instance_recovered`` are pure: they return the event objects of the spec
("Service-generated account events"). ``queue_delivery`` adds the commands
that turn an envelope into a delivery to a pipeline in MULTI mode, so a
caller can make the queueing part of its own transaction (the liveness flip
is one); ``enqueue_service_event`` is that transaction on its own.

A queued service event is exactly what the receiver makes of a post: a
delivery hash, an RQ job in ``SVCGW_QUEUE`` and an entry in the instance's
callback log. From there the workers sign, retry and dead-letter it like any
other delivery, to the instance's forward address at the time of each attempt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from . import keys
from .deliveries import new_delivery_id, queue_delivery
from .settings import Settings

__all__ = [
    "INSTANCE_OFFLINE",
    "INSTANCE_RECOVERED",
    "MANUAL",
    "RELOGIN",
    "enqueue_service_event",
    "instance_offline",
    "instance_recovered",
    "iso8601",
]

INSTANCE_OFFLINE = "InstanceOffline"
INSTANCE_RECOVERED = "InstanceRecovered"

# action_required values (spec: "Service-generated account events").
RELOGIN = "relogin"  # connection broken, login state probably alive
MANUAL = "manual"  # QR scan required; automatic retry stopped
ACTIONS = (RELOGIN, MANUAL)


def iso8601(moment: float) -> str:
    """Unix seconds as ISO 8601 with an offset, to the second: ``2026-11-22T03:40:00+00:00``."""
    return datetime.fromtimestamp(int(moment), UTC).isoformat()


def instance_offline(
    appid: str, *, reason: str, action_required: str, detected_at: float, last_seen_at: float
) -> dict[str, Any]:
    if action_required not in ACTIONS:
        raise ValueError(f"action_required is one of {', '.join(ACTIONS)}, got {action_required!r}")
    return {
        "id": f"{INSTANCE_OFFLINE}:{appid}:{int(detected_at)}",
        "reason": reason,
        "action_required": action_required,
        "detected_at": iso8601(detected_at),
        "last_seen_at": iso8601(last_seen_at),
    }


def instance_recovered(
    appid: str, *, recovered_at: float, offline_since: float, auto_reconnected: bool
) -> dict[str, Any]:
    return {
        "id": f"{INSTANCE_RECOVERED}:{appid}:{int(recovered_at)}",
        "recovered_at": iso8601(recovered_at),
        "offline_seconds": max(int(recovered_at - offline_since), 0),
        "auto_reconnected": auto_reconnected,
    }


def enqueue_service_event(
    redis: Any, settings: Settings, appid: str, event_type: str, events: Sequence[dict[str, Any]]
) -> str:
    """Queue a service event for the instance's forward address; returns the delivery id.

    ``redis`` is a synchronous client. Raises ``LookupError`` when the appid
    is not registered (a delivery needs the owning account).
    """
    account = redis.hget(keys.instance(appid), "account")
    if not account:
        raise LookupError(f"no instance {appid!r}")
    delivery_id = new_delivery_id()
    with redis.pipeline(transaction=True) as pipe:
        queue_delivery(
            pipe,
            settings,
            appid=appid,
            account=account.decode() if isinstance(account, bytes) else str(account),
            event_type=event_type,
            events=events,
            delivery_id=delivery_id,
            now=time.time(),
        )
        pipe.execute()
    return delivery_id
