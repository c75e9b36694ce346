"""Breakers: fewer attempts in flight to an origin whose attempts time out, down to a few trial attempts.

An origin that never answers holds every attempt sent to it until the delivery timeout: with
its caps (``SVCGW_DESTINATION_CONCURRENCY`` per worker) that is 16 connections per worker opened,
held and failed every timeout, each costing the worker about three healthy deliveries, for
nothing. So its allowed attempts in flight shrink while they time out and grow back as it
answers, the shape of TCP's congestion window (additive increase, multiplicative decrease):

* **an attempt that times out** halves the origin's limit, down to :data:`TRIALS` attempts
  in flight per worker process: after its first few timeouts an origin that never answers
  gets only its trial attempts;
* **an attempt that gets any answer** within the timeout, an HTTP error included (it freed its
  slot), adds one to the limit while the origin is tripped: with the attempts in flight
  answering, the limit doubles per round trip, and at the caps the origin is no longer
  tripped. An origin that is merely slow never times out and keeps its full caps;
* a job held back for a tripped origin is not an attempt: its attempt count and schedule are
  untouched, and it is never due earlier than its schedule says. Those held back while every
  attempt times out are lined up over :data:`PARK_SECONDS` (beyond the timeout) and brought
  forward the moment the origin answers again, so its backlog goes at full speed within a
  few of its round trips (``worker.breaker``).

An origin is a callback address's scheme, host and port, as for failing origins
(:mod:`svcgw.delivery.failingorigins`), **of one account**: the record is kept per account
and origin (:func:`name`), so every delivery of that account to that origin shares it, whichever
instance or further destination it comes from, and nothing another account's endpoints on the same
host do (hang, answer slowly, fail) moves it. Many customers' endpoints live on one host (a chat
tool's incoming webhooks, an automation platform, one company's API gateway): a record per origin
alone would let one account's hanging paths shrink every other account's attempts there to a trial attempt
and park their jobs. The receiving host keeps a ceiling across accounts of its own
(``SVCGW_HOST_CONCURRENCY``, :mod:`worker.concurrencycaps`), larger than one account's caps.

**In Redis**, one hash per shard (``svcgw:probing``): field the account and the origin
(:func:`name`: ``<account> <origin>``), value
``limit:since:at:word:opened``: the attempts in flight allowed per worker, when its attempts began
timing out, when the record last changed, the last word (``t`` an attempt timed out, ``a`` one
answered, ``o`` open: back at the caps), and when the first answer after timeouts came (empty
while they time out). The finish script (``svcgw/storage/lua/breaker.lua``) writes it: one
``HGET`` and ``HSET`` per attempt that timed out, and per answered attempt to an origin the
worker holds tripped; nothing for any other attempt. A timeout of an attempt started before the
answer that reopened the origin is old news and changes nothing.

**Shards.** Each shard's finish scripts keep the record of that shard's attempts. A worker
process delivers for every shard and holds one limit per origin: the record that changed
last on any shard wins (the freshest word about the origin). An open record is therefore
kept :data:`OPEN_KEPT` seconds, so that a shard's reopening outweighs another shard's older
timeouts; a record of any word is forgotten when nothing changed it for
:func:`svcgw.delivery.failingorigins.forget_after` (its address was probably changed).

**Upgrading.** Earlier versions named a record by its origin alone. Such a field is not read
(:func:`parse` answers None: it names no account) and nothing writes it again; the workers'
read (``breaker_read.lua``) forgets it by the rule above, at the latest
:func:`~svcgw.delivery.failingorigins.forget_after` after it last changed. The jobs parked
under such an origin (``KeySpace.parked``) keep their place in the retry schedule and are
claimed when due, at most :data:`PARK_SECONDS` and a timeout later; their parked set expires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.delivery.failingorigins import forget_after, name, names, origin_of, read_records, split
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import instance_shard
from svcgw.storage.keys import KeySpace

__all__ = [
    "BEGAN",
    "CHANGED",
    "ENDED",
    "OPEN_KEPT",
    "PARK_SECONDS",
    "REOPENED",
    "TRIALS",
    "BreakerRecord",
    "combine",
    "current",
    "name",
    "of_instance",
    "parse",
    "read_argument",
    "records",
    "script_argument",
    "split",
    "tripped",
    "tripped_anywhere",
]

# Attempts in flight per worker process to an origin whose attempts all time out.
TRIALS = 1
# Seconds an open record (back at the caps) is kept: on several shards it outweighs older timeouts.
OPEN_KEPT = 60.0
# Seconds over which the jobs held back for an origin whose attempts time out are lined up.
PARK_SECONDS = 60.0

# Bits the finish script adds to a job's result (svcgw.delivery.failingorigins has 2 and 4, chains 8).
CHANGED = 16  # the origin's record changed
REOPENED = 32  # the first answer after timeouts: its held-back jobs are brought forward
BEGAN = 64  # its first timeout at its caps: it is tripped from now
ENDED = 128  # back at its caps


@dataclass(frozen=True)
class BreakerRecord:
    """One shard's record of one account's origin."""

    destination: str  # the origin
    limit: int  # attempts in flight allowed per worker process
    since: float  # when its attempts began timing out
    at: float  # when the record last changed
    word: str  # "t" timed out, "a" answered, "o" open again
    opened: float | None = None  # when the first answer after timeouts came
    account: str = ""  # the account whose attempts the record counts

    @property
    def name(self) -> str:
        """The record's field in the hash (:func:`name`)."""
        return name(self.account, self.destination)

    @property
    def tripped(self) -> bool:
        """Whether the origin gets fewer attempts than its caps: timing out, or answering again below them."""
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


def parse(record_name: str, value: str | bytes) -> BreakerRecord | None:
    """One field of the hash, by its name (:func:`name`); None when it cannot be read, or names no account."""
    owner = split(record_name)
    if owner is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    parts = text.split(":")
    if len(parts) != 5 or parts[3] not in ("t", "a", "o"):
        return None
    try:
        return BreakerRecord(owner[1], int(parts[0]), float(parts[1]), float(parts[2]), parts[3],
                     float(parts[4]) if parts[4] else None, account=owner[0])  # fmt: skip
    except ValueError:
        return None


def combine(records: Iterable[BreakerRecord]) -> BreakerRecord | None:
    """The record that counts among several shards' of one origin: the one that changed last."""
    found: BreakerRecord | None = None
    for record in records:
        if found is None or (record.at, -record.limit) > (found.at, -found.limit):
            found = record
    return found


def script_argument(settings: Settings) -> str:
    """The finish script's ``cap:probes``: the caps an origin goes back to, and its floor."""
    return f"{settings.destination_concurrency}:{min(TRIALS, settings.destination_concurrency)}"


def read_argument(settings: Settings) -> tuple[float, float]:
    """``breaker_read.lua``'s ``open kept`` and ``forget after`` (seconds)."""
    return OPEN_KEPT, forget_after(settings)


async def records(
    redis: Redis, keys: KeySpace, destinations: Iterable[str] | None = None, *, account: str | None = None
) -> dict[str, BreakerRecord]:
    """One shard's records, open ones included: ``account``'s of ``destinations`` (origins), by origin;
    with neither, every account's, by record name (:func:`name`)."""
    return await read_records(redis, keys.breakers, destinations, account, parse)


def current(records: Mapping[str, Sequence[BreakerRecord]], settings: Settings, now: float) -> dict[str, BreakerRecord]:
    """Of each origin's records on the shards, the one that counts, where it says the origin is tripped."""
    forget = forget_after(settings)
    found: dict[str, BreakerRecord] = {}
    for key, candidates in records.items():
        record = combine(r for r in candidates if now - r.at <= forget)
        if record is not None and record.tripped:
            found[key] = record
    return found


async def tripped(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    account: str | None = None,
    now: float | None = None,
) -> dict[str, BreakerRecord]:
    """``account``'s origins tripped among ``destinations``, by origin; with neither, every
    account's, by record name (:func:`name`); as one shard's records say."""
    found = await records(redis, keys, destinations, account=account)
    return current({key: [r] for key, r in found.items()}, settings, time.time() if now is None else now)


async def tripped_anywhere(
    shards: Sequence[ShardRedis],
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    account: str | None = None,
    now: float | None = None,
) -> dict[str, BreakerRecord]:
    """As :func:`tripped`, the shards' records combined as a worker combines them (:func:`combine`).

    Records are kept per account: ``account``'s origins come back by origin, and
    another account's records of the same origins are never read.
    """
    wanted = None if destinations is None else list(destinations)
    names(wanted, account)  # a call that names no account fails here, whatever the shards
    answers = await asyncio.gather(*(records(redis, keys, wanted, account=account) for redis, keys in shards))
    by: dict[str, list[BreakerRecord]] = {}
    for answer in answers:
        for key, record in answer.items():
            by.setdefault(key, []).append(record)
    return current(by, settings, time.time() if now is None else now)


async def of_instance(
    shards: Sequence[ShardRedis], settings: Settings, appid: str, url: str | None = None
) -> BreakerRecord | None:
    """The record of the origin ``appid``'s deliveries go to (its own address, or its account's default;
    with ``url``, that address: a further destination's), its account's, when that origin is being
    tripped: what ``svcgw deliveries`` shows beside them."""
    redis, keys = await instance_shard(shards, appid)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.instance(appid), "account")
        pipe.hget(keys.callback_instance(appid), "url")
        account, own = await pipe.execute()
    if not account:
        return None
    if url is None:
        url = _text(own) if own else None
        if not url:
            default = await redis.hget(keys.callback_account(_text(account)), "url")
            url = _text(default) if default else None
    destination = origin_of(url) if url else ""
    if not destination:
        return None
    found = await tripped_anywhere(shards, settings, [destination], account=_text(account))
    return found.get(destination)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
