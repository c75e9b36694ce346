"""The service's own events: ``InstanceOffline`` and ``InstanceRecovered``.

Building is kept apart from queueing. ``instance_offline`` and
``instance_recovered`` are pure: they return the event objects of the spec
("Service-generated account events"). ``svcgw.delivery.queueing.queue_delivery``
adds the commands that turn an envelope into a delivery to a pipeline in
MULTI mode, so the liveness flip that owes an event queues it in its own
transaction (``svcgw.liveness.transitions.go_offline`` and ``go_online``).

A queued service event is exactly what the receiver makes of a post: a
delivery hash, an RQ job in ``SVCGW_QUEUE`` and an entry in the instance's
callback log. From there the workers sign, retry and dead-letter it like any
other delivery, to the instance's forward address at the time of each attempt,
with two differences made when it is queued: each event gets the instance's
next ``seq``, and the delivery waits for the instance's earlier service
events (see :mod:`svcgw.delivery.queueing`). The objects built here have no ``seq``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = [
    "INSTANCE_OFFLINE",
    "INSTANCE_RECOVERED",
    "MANUAL",
    "RELOGIN",
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
