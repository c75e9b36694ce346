"""The layout marker: which key layout a deployment's data is in, decided once for every process.

``svcgw:layout`` (``KeySpace.layout``, one per shard) is a hash written by the first
process of this version that finds it missing, each field with ``HSETNX`` in
one transaction: the first writer's values stand, and every process, started
before or after, reads the same ones (docs/redis-layout.md, "Upgrade in place"):

* ``version``: :data:`VERSION`, the layout of docs/redis-layout.md;
* ``since``: unix seconds, when it was written over the data of an earlier
  version. What was written before is in the earlier layout; a reader that
  must still find it (the ingest script's look-up of the old de-duplication
  keys, :mod:`svcgw.intake.dedup`) looks until ``since`` plus the retention of what
  it looks for. ``0`` when the deployment started on this layout (no instance
  was registered yet, so nothing of an earlier one can exist): nothing to
  look for, from the first post;
* ``dedup``: how the de-duplication window is kept, :data:`HEXPIRE` (fields
  that expire one by one) or :data:`BUCKETS` (a hash per window), from the
  server's version at that first start. It stays what it was when the server
  is upgraded later: every process must look where the others write;
* ``tags``: unix seconds, set once the per-instance keys of before carry
  their ``{appid}`` tag (:mod:`svcgw.storage.renames`). A process that finds it
  missing (a marker of the version before the tags, or none) renames them
  first, then sets it;
* ``one_tag`` (a Redis Cluster's shards): unix seconds, set once every key
  of the shard carries the shard's tag alone (:func:`svcgw.storage.renames.one_tag`),
  which a process that finds it missing sees to first in the same way.

:func:`read` is the I/O; the rest are pure. A marker this version cannot
follow (a later layout, or ``hexpire`` on a server without it) raises
:class:`LayoutError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from svcgw.errors import STORAGE_ERRORS, Failure
from svcgw.storage import renames
from svcgw.storage.keys import KeySpace
from svcgw.storage.servers import on_shard_server

__all__ = [
    "BUCKETS",
    "HEXPIRE",
    "VERSION",
    "Layout",
    "LayoutError",
    "Server",
    "first_marker",
    "mark_at_start",
    "parse",
    "read",
]

log = logging.getLogger("svcgw")

VERSION = 2
HEXPIRE = "hexpire"
BUCKETS = "buckets"


class LayoutError(Failure):
    """The layout marker names a layout this version cannot read or write."""


@dataclass(frozen=True)
class Server:
    """The Redis server's kind and version, from ``INFO server``: what its commands allow."""

    name: str  # "redis" or "valkey"
    version: tuple[int, ...]

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> Server:
        # Valkey answers redis_version 7.2.4 for the clients that check it, whatever its own version.
        if str(info.get("server_name", "")).lower() == "valkey" and "valkey_version" in info:
            return cls("valkey", _numbers(info["valkey_version"]))
        return cls("redis", _numbers(info.get("redis_version", "0")))

    @property
    def field_expiry(self) -> bool:
        """``HEXPIRE`` and the other per-field expiry commands: Redis 7.4, Valkey 9."""
        return self.version >= ((9,) if self.name == "valkey" else (7, 4))

    @property
    def hsetex(self) -> bool:
        """``HSETEX … FNX EX``, a field set with its expiry in one command: Redis 8, Valkey 9."""
        return self.version >= ((9,) if self.name == "valkey" else (8,))


def _numbers(version: Any) -> tuple[int, ...]:
    text = version.decode() if isinstance(version, bytes) else str(version)
    return tuple(int(part) for part in text.split(".") if part.isdigit())


@dataclass(frozen=True)
class Layout:
    version: int
    since: int  # unix seconds
    dedup: str  # HEXPIRE or BUCKETS


def first_marker(server: Server, now: float, *, earlier_data: bool = True) -> dict[str, str]:
    """The fields the first process writes: this layout, from now (or from the start when there is no
    ``earlier_data``), on what ``server`` allows."""
    since = str(int(now)) if earlier_data else "0"
    return {"version": str(VERSION), "since": since, "dedup": HEXPIRE if server.field_expiry else BUCKETS}


def parse(fields: Mapping[bytes | str, bytes | str], server: Server) -> Layout | None:
    """The marker read back (None while a field is missing), checked against what this version and ``server`` can do."""
    text = {_str(k): _str(v) for k, v in fields.items()}
    if not {"version", "since", "dedup"} <= text.keys():
        return None
    try:
        layout = Layout(int(text["version"]), int(float(text["since"])), text["dedup"])
    except ValueError as exc:
        raise LayoutError(f"the layout marker is not readable: {text}") from exc
    if layout.version != VERSION:
        raise LayoutError(f"the data is in key layout {layout.version}; this version reads layout {VERSION}")
    if layout.dedup not in (HEXPIRE, BUCKETS):
        raise LayoutError(f"unknown de-duplication mode {layout.dedup!r} in the layout marker")
    if layout.dedup == HEXPIRE and not server.field_expiry:
        raise LayoutError(
            f"the layout marker says {HEXPIRE}, which this Redis ({server.name} "
            f"{'.'.join(map(str, server.version))}) does not have: it needs Redis 7.4 or Valkey 9"
        )
    return layout


def _str(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def read(redis: Redis, keys: KeySpace, *, now: float | None = None) -> tuple[Layout, Server]:
    """The deployment's layout, written first when no process has yet; and the server's version.

    Two round trips when the marker exists (every start but the deployment's first); the first
    start of this version also renames the keys of before (:mod:`svcgw.storage.renames`).
    """
    # INFO apart, to the server that holds the shard's keys: a Cluster's pipeline cannot name it.
    info = await on_shard_server(redis, keys, "INFO", "server")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.layout)
        # Every earlier version registered its instances here before it stored anything of theirs.
        pipe.exists(keys.instances)
        fields, registered = await pipe.execute()
    server = Server.from_info(info)
    layout = parse(fields, server)
    if layout is None:
        first = first_marker(server, time.time() if now is None else now, earlier_data=bool(registered))
        async with redis.pipeline(transaction=True) as pipe:
            for name, value in first.items():
                pipe.hsetnx(keys.layout, name, value)
            pipe.hgetall(keys.layout)
            *_, fields = await pipe.execute()
        layout = parse(fields, server)
    if layout is None:  # pragma: no cover - HSETNX of every field has just run
        raise LayoutError("the layout marker could not be written")
    # Before anything is written under a name of now: old processes are stopped by then.
    done = "one_tag" if keys.tag else "tags"
    if not any(name in fields for name in (done.encode(), done)):
        if keys.tag:
            await renames.one_tag(cast(AsyncRedisCluster, redis), keys)
        else:
            await renames.tag_instances(redis, keys)
        await redis.hsetnx(keys.layout, done, str(int(time.time() if now is None else now)))
    return layout, server


async def mark_at_start(redis: Redis, keys: KeySpace) -> None:
    """Read (or write) the marker when a process starts, before it stores anything.

    A deployment's very first process writes it while no instance is registered yet, so its
    ``since`` says there is nothing of an earlier layout to look for. Redis not answering yet
    does not stop the start: the ingest reads the marker at its first post instead. A marker
    this version cannot follow does (:class:`LayoutError`).
    """
    try:
        await read(redis, keys)
    except STORAGE_ERRORS as exc:
        log.warning("layout marker not read at start (%s); read at the first post instead", type(exc).__name__)
