"""Destinations being probed: fewer attempts in flight to a destination whose attempts time out.

A destination that never answers holds every attempt sent to it until the delivery timeout: with
its caps (``SVCGW_DESTINATION_CONCURRENCY`` per worker) that is 16 connections per worker opened,
held and failed every timeout, each costing the worker about three healthy deliveries, for
nothing. So its allowed attempts in flight shrink while they time out and grow back as it
answers, the shape of TCP's congestion window (additive increase, multiplicative decrease):

* **an attempt that times out** halves the destination's limit, down to :data:`PROBES` attempts
  in flight per worker process: after its first few timeouts a destination that never answers
  gets only its probing attempts;
* **an attempt that gets any answer** within the timeout, an HTTP error included (it freed its
  slot), adds one to the limit while the destination is probed: with the attempts in flight
  answering, the limit doubles per round trip, and at the caps the destination is no longer
  probed. A destination that is merely slow never times out and keeps its full caps;
* a job held back for a probed destination is not an attempt: its attempt count and schedule are
  untouched, and it is never due earlier than its schedule says. Those held back while every
  attempt times out are lined up over :data:`PARK_SECONDS` (beyond the timeout) and brought
  forward the moment the destination answers again, so its backlog goes at full speed within a
  few of its round trips (``worker.probing``).

A destination is the **origin** of a callback address, as for failing destinations
(:mod:`svcgw.delivery.failingdestinations`): every delivery to it shares its state, whichever
instance or account it comes from.

**In Redis**, one hash per shard (``svcgw:probing``): field the destination, value
``limit:since:at:word:opened``: the attempts in flight allowed per worker, when its attempts began
timing out, when the record last changed, the last word (``t`` an attempt timed out, ``a`` one
answered, ``o`` open: back at the caps), and when the first answer after timeouts came (empty
while they time out). The finish script (``svcgw/storage/lua/probing.lua``) writes it: one
``HGET`` and ``HSET`` per attempt that timed out, and per answered attempt to a destination the
worker holds probed; nothing for any other attempt. A timeout of an attempt started before the
answer that reopened the destination is old news and changes nothing.

**Shards.** Each shard's finish scripts keep the record of that shard's attempts. A worker
process delivers for every shard and holds one limit per destination: the record that changed
last on any shard wins (the freshest word about the destination). An open record is therefore
kept :data:`OPEN_KEPT` seconds, so that a shard's reopening outweighs another shard's older
timeouts; a record of any word is forgotten when nothing changed it for
:func:`svcgw.delivery.failingdestinations.forget_after` (its address was probably changed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.delivery.failingdestinations import destination_of, forget_after
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import instance_shard
from svcgw.storage.keys import KeySpace

__all__ = [
    "BEGAN",
    "CHANGED",
    "ENDED",
    "OPEN_KEPT",
    "PARK_SECONDS",
    "PROBES",
    "REOPENED",
    "Probe",
    "combine",
    "current",
    "of_instance",
    "parse",
    "probing",
    "probing_anywhere",
    "read_argument",
    "records",
    "script_argument",
]

# Attempts in flight per worker process to a destination whose attempts all time out.
PROBES = 1
# Seconds an open record (back at the caps) is kept: on several shards it outweighs older timeouts.
OPEN_KEPT = 60.0
# Seconds over which the jobs held back for a destination whose attempts time out are lined up.
PARK_SECONDS = 60.0

# Bits the finish script adds to a job's result (svcgw.delivery.failingdestinations has 2 and 4, chains 8).
CHANGED = 16  # the destination's record changed
REOPENED = 32  # the first answer after timeouts: its held-back jobs are brought forward
BEGAN = 64  # its first timeout at its caps: it is probed from now
ENDED = 128  # back at its caps


@dataclass(frozen=True)
class Probe:
    """One shard's record of a destination."""

    destination: str
    limit: int  # attempts in flight allowed per worker process
    since: float  # when its attempts began timing out
    at: float  # when the record last changed
    word: str  # "t" timed out, "a" answered, "o" open again
    opened: float | None = None  # when the first answer after timeouts came

    @property
    def probed(self) -> bool:
        """Whether the destination gets fewer attempts than its caps: timing out, or answering again below them."""
        return self.word in ("t", "a")

    @property
    def hanging(self) -> bool:
        """Whether its last word is a timeout: its held-back jobs wait long, to be brought forward when it answers."""
        return self.word == "t"

    def as_dict(self) -> dict[str, object]:
        return {
            "destination": self.destination,
            "probing_since": self.since,
            "attempts_in_flight": self.limit,
            "answering": self.word == "a",
            "last_change": self.at,
        }


def parse(destination: str, value: str | bytes) -> Probe | None:
    """One field of the hash; None when it cannot be read."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    parts = text.split(":")
    if len(parts) != 5 or parts[3] not in ("t", "a", "o"):
        return None
    try:
        return Probe(destination, int(parts[0]), float(parts[1]), float(parts[2]), parts[3],
                     float(parts[4]) if parts[4] else None)  # fmt: skip
    except ValueError:
        return None


def combine(records: Iterable[Probe]) -> Probe | None:
    """The record that counts among several shards' of one destination: the one that changed last."""
    found: Probe | None = None
    for record in records:
        if found is None or (record.at, -record.limit) > (found.at, -found.limit):
            found = record
    return found


def script_argument(settings: Settings) -> str:
    """The finish script's ``cap:probes``: the caps a destination goes back to, and its floor."""
    return f"{settings.destination_concurrency}:{min(PROBES, settings.destination_concurrency)}"


def read_argument(settings: Settings) -> tuple[float, float]:
    """``probing_read.lua``'s ``open kept`` and ``forget after`` (seconds)."""
    return OPEN_KEPT, forget_after(settings)


async def records(redis: Redis, keys: KeySpace, destinations: Iterable[str] | None = None) -> dict[str, Probe]:
    """One shard's records (every one when ``destinations`` is None), open ones included, by destination."""
    if destinations is None:
        raw = await redis.hgetall(keys.probing_destinations)
        pairs = [(_text(name), value) for name, value in raw.items()]
    else:
        wanted = sorted({d for d in destinations if d})
        if not wanted:
            return {}
        values = await redis.hmget(keys.probing_destinations, wanted)
        pairs = [(name, value) for name, value in zip(wanted, values, strict=True) if value is not None]
    found: dict[str, Probe] = {}
    for name, value in pairs:
        record = parse(name, value)
        if record is not None:
            found[name] = record
    return found


def current(records: Mapping[str, Sequence[Probe]], settings: Settings, now: float) -> dict[str, Probe]:
    """Of each destination's records on the shards, the one that counts, where it says the destination is probed."""
    forget = forget_after(settings)
    found: dict[str, Probe] = {}
    for name, candidates in records.items():
        record = combine(r for r in candidates if now - r.at <= forget)
        if record is not None and record.probed:
            found[name] = record
    return found


async def probing(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    now: float | None = None,
) -> dict[str, Probe]:
    """The destinations being probed among ``destinations`` (every one when None), as one shard's records say."""
    found = await records(redis, keys, destinations)
    return current({name: [r] for name, r in found.items()}, settings, time.time() if now is None else now)


async def probing_anywhere(
    shards: Sequence[ShardRedis],
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    now: float | None = None,
) -> dict[str, Probe]:
    """The destinations being probed, the shards' records combined as a worker combines them (:func:`combine`)."""
    wanted = None if destinations is None else list(destinations)
    answers = await asyncio.gather(*(records(redis, keys, wanted) for redis, keys in shards))
    by: dict[str, list[Probe]] = {}
    for answer in answers:
        for name, record in answer.items():
            by.setdefault(name, []).append(record)
    return current(by, settings, time.time() if now is None else now)


async def of_instance(shards: Sequence[ShardRedis], settings: Settings, appid: str) -> Probe | None:
    """The record of the destination ``appid``'s deliveries go to (its own address, or its account's default),
    when that destination is being probed: what ``svcgw deliveries`` shows beside them."""
    redis, keys = await instance_shard(shards, appid)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.instance(appid), "account")
        pipe.hget(keys.callback_instance(appid), "url")
        account, url = await pipe.execute()
    if not url and account:
        url = await redis.hget(keys.callback_account(_text(account)), "url")
    destination = destination_of(_text(url)) if url else ""
    if not destination:
        return None
    return (await probing_anywhere(shards, settings, [destination])).get(destination)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
