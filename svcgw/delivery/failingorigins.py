"""Failing origins: callback addresses whose every attempt has failed for a while.

An origin is the scheme, host and port of a callback address (as
:mod:`svcgw.callbacks.origins` normalises it), not the whole URL: the paths
of one host usually fail together (the host is down, its certificate
expired, its proxy answers 502), and the origin is also what a Bearer token
belongs to. ``https://hooks.example.com:443`` is one origin.

An origin is kept **per account** (:func:`name`): the record counts one
account's attempts to that origin, whichever of its instances or further
destinations they come from. Many customers' endpoints live on one host (a
chat tool's incoming webhooks, an automation platform): a record per origin
alone would tell every account there that some other tenant's attempts fail
(a banner on its console naming a host it may never have had a failure at),
and another account's successes there would end the record of one whose
endpoints still fail.

The delivery engine's finish script (``svcgw/storage/lua/queue_finish.lua``) keeps
one field per account and origin in the hash ``svcgw:failing`` while its
attempts fail: field ``<account> <origin>`` (:func:`name`, as probing's records
are named), value ``first failure:last failure:flagged``. A successful attempt
deletes the field, so an origin that answers is never in the hash; the cost
on the delivery path is one ``HGET`` per attempt, and a write only for a failed
attempt or the first success after failures.

An origin is **failing** when its attempts have all failed since the
first failure, at least ``SVCGW_FAILING_AFTER`` seconds ago. The console's
banner and the ``svcgw_failing_destinations`` gauge read that from the hash
at once; the worker's two log records (``destination failing`` and
``destination recovered``, one each however many workers and attempts) are
written when an attempt finds the change: the first failed attempt past the
threshold sets ``flagged``, the first success after it reports the recovery.

An origin with no failed attempt for longer than the threshold plus the
longest retry delay (:func:`forget_after`) is forgotten: its address was
probably changed, and nothing tries it any more.

With several shards each shard's engines keep the hash of that shard (the
finish script runs there). An origin is failing for the service when it
is failing on some shard (:func:`failing_anywhere`): its instances there get
nothing through, whatever the others get; it is shown from the earliest
first failure.

**Upgrading.** Earlier versions named a record by its origin alone. Such a field is
not read (:func:`parse` answers None: it names no account) and nothing writes it
again: it flags nothing, counts in no gauge, and nothing a successful attempt does
touches it. Each account's record starts afresh from its first failed attempt after
the upgrade, so an origin failing across the upgrade is flagged again
``SVCGW_FAILING_AFTER`` seconds after it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from redis.asyncio import Redis

from svcgw.callbacks.origins import origin
from svcgw.config.settings import Settings
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import KeySpace

__all__ = [
    "RECOVERED",
    "STARTED",
    "FailingOrigin",
    "failing",
    "failing_anywhere",
    "forget_after",
    "is_failing",
    "name",
    "origin_of",
    "parse",
    "read_records",
    "script_argument",
    "split",
]

# Bits the finish script adds to a job's result (bit 0 is "the claim was still ours").
STARTED = 2
RECOVERED = 4

Record = TypeVar("Record")


def name(account: str, destination: str) -> str:
    """The record's name of ``account``'s attempts to ``destination`` (an origin); '' when either is missing.

    A space parts them: neither an account id nor an origin (``scheme://host:port``) holds one. Failing
    and probing records (:mod:`svcgw.delivery.breaker`) are named alike.
    """
    if not account or not destination:
        return ""
    return f"{account} {destination}"


def split(record_name: str) -> tuple[str, str] | None:
    """The account and the origin a record's name says; None for a name of another form (an origin
    alone, as earlier versions named records)."""
    account, space, destination = record_name.partition(" ")
    if not space or not account or not destination:
        return None
    return account, destination


def names(destinations: Iterable[str] | None, account: str | None) -> dict[str, str] | None:
    """The records' names to read, each with the key the answer gives it (its origin); None for every record.

    Records are kept per account: origins are read only as some account's.
    """
    if destinations is None:
        if account is not None:
            raise ValueError("an account's records are read by its destinations")
        return None
    if account is None:
        raise ValueError("records are kept per account: name the account whose destinations these are")
    return {name(account, d): d for d in sorted({d for d in destinations if d})} if account else {}


async def read_records(
    redis: Redis,
    hash_key: str,
    destinations: Iterable[str] | None,
    account: str | None,
    parse: Callable[[str, str | bytes], Record | None],
) -> dict[str, Record]:
    """One shard's records in the hash ``hash_key`` (fields named by :func:`name`), each as ``parse`` reads it,
    one it cannot read left out: ``account``'s of ``destinations`` (origins), by origin; with neither, every
    account's, by record name. One ``HMGET`` (none when no origin is asked of) or one ``HGETALL``.

    Failing records and probing records (:func:`svcgw.delivery.breaker.records`) are read alike; neither
    is on an attempt's path, which the finish script reads in Redis.
    """
    wanted = names(destinations, account)
    if wanted is None:
        raw = await redis.hgetall(hash_key)
        triples = [(_text(field), _text(field), value) for field, value in raw.items()]
    else:
        if not wanted:
            return {}
        fields = list(wanted)
        values = await redis.hmget(hash_key, fields)
        triples = [(f, wanted[f], v) for f, v in zip(fields, values, strict=True) if v is not None]
    found: dict[str, Record] = {}
    for field, key, value in triples:
        record = parse(field, value)
        if record is not None:
            found[key] = record
    return found


@dataclass(frozen=True)
class FailingOrigin:
    """One shard's record of one account's origin."""

    destination: str  # the origin
    first_failure: float
    last_failure: float
    flagged: bool
    account: str = ""  # the account whose attempts the record counts

    def as_dict(self) -> dict[str, object]:
        return {"destination": self.destination, "failing_since": self.first_failure, "last_failure": self.last_failure}


def origin_of(url: str | None) -> str:
    """The origin of a callback address: ``scheme://host:port``; '' when it has none."""
    if not url:
        return ""
    return _origin(url)


# The engine asks for every attempt; a worker sees few distinct addresses.
@functools.lru_cache(maxsize=4096)
def _origin(url: str) -> str:
    found = origin(url)
    if found is None:
        return ""
    scheme, host, port = found
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def forget_after(settings: Settings) -> float:
    """Seconds without a failed attempt after which an origin's failures are forgotten."""
    return settings.failing_after + max(settings.retry_schedule, default=0.0)


def script_argument(settings: Settings) -> str:
    """The finish script's ``failing after:forget after``."""
    return f"{settings.failing_after}:{forget_after(settings)!r}"


def parse(record_name: str, value: str | bytes) -> FailingOrigin | None:
    """One field of the hash, by its name (:func:`name`); None when it cannot be read, or names no account."""
    owner = split(record_name)
    if owner is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    first, _, rest = text.partition(":")
    last, _, flagged = rest.partition(":")
    try:
        return FailingOrigin(owner[1], float(first), float(last), flagged == "1", account=owner[0])
    except ValueError:
        return None


def is_failing(record: FailingOrigin, settings: Settings, now: float) -> bool:
    """Failing now: failures only, the first long enough ago, the last recent enough to be current."""
    return now - record.first_failure >= settings.failing_after and now - record.last_failure <= forget_after(settings)


async def failing(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    account: str | None = None,
    now: float | None = None,
) -> dict[str, FailingOrigin]:
    """``account``'s failing origins among ``destinations`` (the origins asked of), by origin; with neither, every
    account's, by record name (:func:`name`)."""
    moment = time.time() if now is None else now
    found = await read_records(redis, keys.failing_origins, destinations, account, parse)
    return {key: record for key, record in found.items() if is_failing(record, settings, moment)}


async def failing_anywhere(
    shards: Sequence[ShardRedis],
    settings: Settings,
    destinations: Iterable[str] | None = None,
    *,
    account: str | None = None,
    now: float | None = None,
) -> dict[str, FailingOrigin]:
    """:func:`failing` on every shard's hash (clients by shard index), merged: failing on any shard.

    Records are kept per account: ``account``'s origins come back by origin, and another
    account's records of the same origins are never read.
    """
    wanted = None if destinations is None else list(destinations)
    names(wanted, account)  # a call that names no account fails here, whatever the shards
    answers = await asyncio.gather(
        *(failing(redis, keys, settings, wanted, account=account, now=now) for redis, keys in shards)
    )
    found: dict[str, FailingOrigin] = {}
    for answer in answers:
        for name, record in answer.items():
            if name not in found or record.first_failure < found[name].first_failure:
                found[name] = record
    return found


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
