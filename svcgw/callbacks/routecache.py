"""The routing records of an instance, kept by a receiver process: which further destinations take a post.

The ingest script names every key before it runs, so the receiver must know
the destinations of a post beforehand (:mod:`svcgw.intake.fanout`). It reads
the instance's two routing records (:mod:`svcgw.callbacks.routes`), the copies
on the instance's shard of ``KeySpace.routes_account`` and
``KeySpace.routes_instance``, in one pipeline, and keeps them per instance for
``SVCGW_ROUTES_CACHE_SECONDS``: a post costs no round trip of its own, an
instance one read of both records per that time. A destination added or
enabled takes posts within it; one disabled or removed within it still gets
the deliveries made meanwhile, and the worker decides them when it claims
them. An instance never changes account, so the account that names the
account's record is read once per process (the instance's hash's
``account`` field) and kept.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from svcgw.callbacks.routes import route
from svcgw.storage.keys import KeySpace

__all__ = ["KEPT_INSTANCES", "NO_ROUTES", "Routes", "RoutesCache", "read_routes"]

# Instances whose records (and, apart, whose accounts) one process keeps at most: the least
# recently posted to are forgotten first, and read again at their next post.
KEPT_INSTANCES = 100_000


@dataclass(frozen=True)
class Routes:
    """The two routing records of an instance: its account's, and its own (each empty when there is none)."""

    account: Mapping[str, str]
    instance: Mapping[str, str]

    def targets(self, event_type: str) -> list[str]:
        """The destinations a post of ``event_type`` goes to: the account's, then the instance's, each once."""
        if not self.account and not self.instance:
            return []
        found = route(self.account, event_type)
        found.extend(d for d in route(self.instance, event_type) if d not in found)
        return found


NO_ROUTES = Routes({}, {})


class RoutesCache:
    """An instance's :class:`Routes`, read at most once per ``seconds`` per process; its account, once.

    ``redis`` is the instance's shard's asyncio client (bytes or text), ``keys`` its names. The
    reads of one instance's records that are due at once are one read, which every post that
    wants it awaits. ``clock`` (monotonic seconds) is replaced by tests.
    """

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        kept: int = KEPT_INSTANCES,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.seconds = seconds
        self._clock = clock
        self._kept = kept
        self._accounts: OrderedDict[str, str] = OrderedDict()
        self._routes: OrderedDict[str, tuple[float, Routes]] = OrderedDict()
        self._reading: dict[str, asyncio.Future[Routes]] = {}

    async def targets(self, appid: str, event_type: str) -> list[str]:
        """The destinations that take ``appid``'s post of ``event_type`` (:class:`svcgw.intake.fanout.Targets`)."""
        return (await self.routes(appid)).targets(event_type)

    def fresh(self, appid: str) -> Routes | None:
        """The routes read for ``appid`` less than ``seconds`` ago, or None."""
        held = self._routes.get(appid)
        if held is None or held[0] <= self._clock():
            return None
        return held[1]

    def keep(self, appid: str, routes: Routes, read_at: float) -> None:
        """Keep what was read at ``read_at`` (the clock's) until ``seconds`` after it."""
        _bounded(self._routes, appid, (read_at + self.seconds, routes), self._kept)

    def account_of(self, appid: str) -> str | None:
        """The account kept for ``appid``, if it was read."""
        return self._accounts.get(appid)

    async def routes(self, appid: str) -> Routes:
        """``appid``'s routes: the kept ones while fresh, else read (once, for whoever else is waiting for them)."""
        held = self.fresh(appid)
        if held is not None:
            return held
        reading = self._reading.get(appid)
        if reading is None:
            reading = asyncio.ensure_future(self._read(appid))
            self._reading[appid] = reading
            reading.add_done_callback(lambda _: self._reading.pop(appid, None))
        # Shielded: a post given up (its client gone) does not cancel the read others wait for.
        return await asyncio.shield(reading)

    async def _read(self, appid: str) -> Routes:
        read_at = self._clock()
        account = self._accounts.get(appid)
        if account is None:
            found = await self.redis.hget(self.keys.instance(appid), "account")
            if found is None:
                return NO_ROUTES  # no such instance on this shard: the script refuses its post anyway
            account = _text(found)
            _bounded(self._accounts, appid, account, self._kept)
        routes = await read_routes(self.redis, self.keys, account, appid)
        self.keep(appid, routes, read_at)
        return routes


async def read_routes(redis: Redis, keys: KeySpace, account: str, appid: str) -> Routes:
    """``appid``'s two routing records as they are now on its shard (``redis``, ``keys``), in one pipeline.

    What the cache reads for a receiver's posts, and what a service event of the instance
    (``InstanceOffline``, ``InstanceRecovered``: :mod:`svcgw.liveness.transitions`) reads when it
    is queued, so both go to the same destinations.
    """
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.routes_account(account))
        pipe.hgetall(keys.routes_instance(appid))
        of_account, of_instance = await pipe.execute()
    routes = Routes(_record(of_account), _record(of_instance))
    return NO_ROUTES if not routes.account and not routes.instance else routes


def _record(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {_text(name): _text(value) for name, value in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bounded(held: OrderedDict[str, Any], key: str, value: Any, most: int) -> None:
    held[key] = value
    held.move_to_end(key)
    while len(held) > most:
        held.popitem(last=False)
