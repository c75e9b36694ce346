"""Failing destinations: callback addresses whose every attempt has failed for a while.

A destination is the **origin** of a callback address (scheme, host and
port, as :mod:`svcgw.callbacks.origins` normalises it), not the whole URL: the paths
of one host usually fail together (the host is down, its certificate
expired, its proxy answers 502), and the origin is also what a Bearer token
belongs to. ``https://hooks.example.com:443`` is one destination.

The delivery engine's finish script (``svcgw/storage/lua/queue_finish.lua``) keeps
one field per destination in the hash ``svcgw:failing`` while its attempts
fail: ``first failure:last failure:flagged``. A successful attempt deletes
the field, so a destination that answers is never in the hash; the cost on
the delivery path is one ``HGET`` per attempt, and a write only for a
failed attempt or the first success after failures.

A destination is **failing** when its attempts have all failed since the
first failure, at least ``SVCGW_FAILING_AFTER`` seconds ago. The console's
banner and the ``svcgw_failing_destinations`` gauge read that from the hash
at once; the worker's two log records (``destination failing`` and
``destination recovered``, one each however many workers and attempts) are
written when an attempt finds the change: the first failed attempt past the
threshold sets ``flagged``, the first success after it reports the recovery.

A destination with no failed attempt for longer than the threshold plus the
longest retry delay (:func:`forget_after`) is forgotten: its address was
probably changed, and nothing tries it any more.

With several shards each shard's engines keep the hash of that shard (the
finish script runs there). A destination is failing for the service when it
is failing on some shard (:func:`failing_anywhere`): its instances there get
nothing through, whatever the others get; it is shown from the earliest
first failure.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from svcgw.callbacks.origins import origin
from svcgw.config.settings import Settings
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import KeySpace

__all__ = [
    "RECOVERED",
    "STARTED",
    "FailingDestination",
    "destination_of",
    "failing",
    "failing_anywhere",
    "forget_after",
    "parse",
    "script_argument",
]

# Bits the finish script adds to a job's result (bit 0 is "the claim was still ours").
STARTED = 2
RECOVERED = 4


@dataclass(frozen=True)
class FailingDestination:
    destination: str
    first_failure: float
    last_failure: float
    flagged: bool

    def as_dict(self) -> dict[str, object]:
        return {"destination": self.destination, "failing_since": self.first_failure, "last_failure": self.last_failure}


def destination_of(url: str | None) -> str:
    """The destination of a callback address: ``scheme://host:port``; '' when it has none."""
    if not url:
        return ""
    return _destination(url)


# The engine asks for every attempt; a worker sees few distinct addresses.
@functools.lru_cache(maxsize=4096)
def _destination(url: str) -> str:
    found = origin(url)
    if found is None:
        return ""
    scheme, host, port = found
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def forget_after(settings: Settings) -> float:
    """Seconds without a failed attempt after which a destination's failures are forgotten."""
    return settings.failing_after + max(settings.retry_schedule, default=0.0)


def script_argument(settings: Settings) -> str:
    """The finish script's ``failing after:forget after``."""
    return f"{settings.failing_after}:{forget_after(settings)!r}"


def parse(destination: str, value: str | bytes) -> FailingDestination | None:
    """One field of the hash; None when it cannot be read."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    first, _, rest = text.partition(":")
    last, _, flagged = rest.partition(":")
    try:
        return FailingDestination(destination, float(first), float(last), flagged == "1")
    except ValueError:
        return None


def is_failing(record: FailingDestination, settings: Settings, now: float) -> bool:
    """Failing now: failures only, the first long enough ago, the last recent enough to be current."""
    return now - record.first_failure >= settings.failing_after and now - record.last_failure <= forget_after(settings)


async def failing(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    now: float | None = None,
) -> dict[str, FailingDestination]:
    """The failing destinations among ``destinations`` (every one when None), by destination."""
    moment = time.time() if now is None else now
    if destinations is None:
        raw = await redis.hgetall(keys.failing_destinations)
        pairs = [(_text(name), value) for name, value in raw.items()]
    else:
        wanted = sorted({d for d in destinations if d})
        if not wanted:
            return {}
        values = await redis.hmget(keys.failing_destinations, wanted)
        pairs = [(name, value) for name, value in zip(wanted, values, strict=True) if value is not None]
    found: dict[str, FailingDestination] = {}
    for name, value in pairs:
        record = parse(name, value)
        if record is not None and is_failing(record, settings, moment):
            found[name] = record
    return found


async def failing_anywhere(
    shards: Sequence[ShardRedis],
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    now: float | None = None,
) -> dict[str, FailingDestination]:
    """:func:`failing` on every shard's hash (clients by shard index), merged: failing on any shard."""
    wanted = None if destinations is None else list(destinations)
    found: dict[str, FailingDestination] = {}
    for answer in await asyncio.gather(*(failing(redis, keys, settings, wanted, now=now) for redis, keys in shards)):
        for name, record in answer.items():
            if name not in found or record.first_failure < found[name].first_failure:
                found[name] = record
    return found


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
