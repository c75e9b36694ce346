"""What a ``GapClosed`` post tells the prober: the instance's long connection closed, and why.

The receiver hands every stored ``GapClosed`` here (:mod:`svcgw.intake.ingest`): a login that is gone
(``-11002``, ``-1008``) stops maintenance and is reported offline without a reconnect; any other
non-zero code asks for a probe at once. The prober reads what was recorded (``gap_code``,
``gap_message``, ``gap_at``, ``gap_manual`` on the instance) and says why in its
``InstanceOffline`` (:func:`gap_reason`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import orjson
from redis.asyncio import Redis

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = [
    "GAP_NORMAL_STOP",
    "MANUAL_GAP_CODES",
    "GapClose",
    "gap_reason",
    "on_gap_closed",
    "parse_gap_closed",
]

# GapClosed codes (spec: Events, "GapClosed code").
GAP_NORMAL_STOP = 0
MANUAL_GAP_CODES: Mapping[int, str] = {
    -11002: "logged in on another device",
    -1008: "logged out on the mobile side",
}
GAP_MEANINGS: Mapping[int, str] = {
    -11001: "connection must be re-established",
    -1: "long connection error",
    **MANUAL_GAP_CODES,
}

GapClose = tuple[int, str]  # (code, message) of one GapClosed event


def parse_gap_closed(raw_events: Sequence[bytes]) -> list[GapClose]:
    """(code, message) of each ``GapClosed`` event; events without an integer code are skipped."""
    closes: list[GapClose] = []
    for raw in raw_events:
        try:
            event = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        code = event.get("code") if isinstance(event, dict) else None
        if isinstance(code, int) and not isinstance(code, bool):
            message = event.get("message")
            closes.append((code, message if isinstance(message, str) else ""))
    return closes


async def on_gap_closed(redis: Redis, keys: KeySpace, appid: str, closes: Sequence[GapClose]) -> str:
    """Hand a ``GapClosed`` of a maintained instance to the prober; returns what was asked of it.

    * ``-11002``, ``-1008``: the login is gone. The prober reports the instance
      offline with ``action_required`` manual and stops maintaining it,
      without a reconnect attempt ("manual").
    * ``-11001``, ``-1`` and any other non-zero code: a probe at once, which
      reconnects and then judges; ``InstanceOffline`` (relogin) only if the
      reconnect fails ("probe").
    * ``0``: the close that follows ``long/stop``. Maintenance is switched off
      by the gateway's ``mark_stopped``, not here: a late ``0`` from an earlier
      stop must not switch off a connection started again since ("none").

    Instances that are not maintained (stopped, logged out, already offline
    with manual) are left alone.
    """
    manual = [c for c in closes if c[0] in MANUAL_GAP_CODES]
    other = [c for c in closes if c[0] != GAP_NORMAL_STOP and c[0] not in MANUAL_GAP_CODES]
    if not (manual or other):
        return "none"
    code, message = (manual or other)[0]
    script = register(redis, "liveness_gap_closed")
    applied = await script(
        keys=[keys.instance(appid), keys.probe_schedule],
        args=[code, message, repr(time.time()), appid, "1" if manual else "0"],
    )
    if not int(applied):
        return "none"
    return "manual" if manual else "probe"


def gap_reason(code: int, message: str) -> str:
    meaning = GAP_MEANINGS.get(code, "long connection closed")
    detail = f": {message}" if message and message != meaning else ""
    return f"{meaning} (GapClosed {code}{detail})"
