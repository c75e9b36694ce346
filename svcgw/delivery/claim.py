"""Claiming jobs: their ids popped and leased, then what their attempts need read and each started.

Two scripts, so that each names every key it touches (docs/redis-layout.md, "Scripts and their
KEYS"): ``queue_claim.lua`` pops and leases up to a batch of ids; ``queue_read.lua`` reads and
starts them under keys named from those ids. A job's callback hashes are named by its instance,
which a delivery id holds (svcgw.deliveryid), and by its account, remembered from earlier claims
of the instance; the owner of a ``dlv_`` id or of an instance not seen yet costs one read before.
The read checks the owner it was named for against the job's own fields: a wrong memory costs a
second read, never another account's address.

A delivery to a further destination (docs/destinations.md) names its instance, its post and its
destination in its id (``<appid>-<ms>-<seq>_<16 hex>``, svcgw.deliveryid.parse_destination), or, a
``dlv_`` one, in its fields (``destination``, read with its owner at no cost): its read names the destination's hash
and its pace record (``KeySpace.destination_pace``) in place of the two callback hashes, so every job
still names four keys. The read holds back, without an attempt, a job whose destination is disabled
(due again in ``SVCGW_DISABLED_RECHECK_SECONDS``) or over its rate (due when its turn comes,
:mod:`svcgw.delivery.pacing`); one whose destination was removed is started with no address, and its
attempt fails (:mod:`worker.sending`). Jobs of the primary address read and name what they always did.

A job whose account, or whose destination, has no free slot in the worker goes back to the
scheduled registry without an attempt. A destination's slots and probing are each account's own
(:mod:`worker.concurrencycaps`, :mod:`worker.breaker`), so its jobs are held back by their account
and the netloc of their address together (:func:`held_as`); only the ceiling of a host across
accounts (``SVCGW_HOST_CONCURRENCY``) holds back every account's jobs to it, by the netloc alone.
The read does that for any job; the pop does it, unread, for the jobs of instances whose account
and destination a read showed within ``SEEN_SECONDS`` (:class:`Sightings`). The jobs of an account
whose endpoints hang are most of what a claim pops beside it, and each then costs the worker and
Redis an id in a sorted set rather than a read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis as AsyncRedis

from svcgw import deliveryid
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import rq_now
from svcgw.storage.scripts import register

__all__ = ["DELIVERY_FIELDS", "SEEN_SECONDS", "Claimed", "Claimer", "Hold", "Sightings", "held_as"]

# The delivery hash fields an attempt reads; ``chain`` (service events only) is read for the finish;
# ``dup`` (a post with duplicates only) tells the finish whether its event ids are kept;
# ``destination`` (a further destination's deliveries only) last: queue_read.lua reads it there.
DELIVERY_FIELDS = (
    "appid", "account", "event_type", "body", "failures", "state", "attempts", "received_at", "chain", "dup",
    "destination",
)  # fmt: skip

# Reads of one claimed batch before a job whose owner keeps changing is given back.
_READ_TRIES = 3
# Instances whose account a claimer remembers (a few MB at most).
_ACCOUNTS_KEPT = 100_000
# How long what a read showed of an instance (its account, its destination) lets the pop hold its
# jobs back unread. An instance keeps its account, but its address may change: a job is held back
# for a destination it no longer goes to only until the next read of one of its instance's jobs.
SEEN_SECONDS = 5.0
# Instances named to the pop at most: the ones beyond are held back by the read, as before.
_HELD_BACK_MOST = 1000


def held_as(account: str, netloc: str) -> str:
    """The name the claim holds back ``account``'s jobs to ``netloc`` by: ``<account> <netloc>``.

    ``queue_read.lua`` spells it so; a netloc alone (no account) holds back every account's jobs to it.
    """
    return f"{account} {netloc}" if account else netloc


@dataclass(frozen=True)
class Hold:
    """When the jobs held back for a full destination or a busy account are due again.

    ``spread``: they are lined up evenly over that many seconds after ``due`` rather than all due
    then. ``park``: the parked set (``KeySpace.parked``) of a destination whose attempts time out,
    which notes them so that they can be brought forward when it answers again
    (:mod:`svcgw.delivery.breaker`); '' for none.
    """

    due: float
    spread: float = 0.0
    park: str = ""

    @property
    def last(self) -> float:
        return self.due + self.spread


@dataclass(slots=True)
class Claimed:
    """A claimed job with what its attempt needs, as read at claim time."""

    delivery_id: str
    fields: dict[str, bytes | None]  # DELIVERY_FIELDS; None where missing
    # The instance's callback configuration; for a further destination's delivery, the destination's
    # url, secret and token under the same names (empty: it was removed).
    own: dict[str, str]
    default: dict[str, str]  # the account's, read only when the instance has no address

    @property
    def destination_id(self) -> str:
        """The further destination (``dst_…``) the delivery goes to; '' for the primary address.

        A ``dlv_`` delivery's field says; one named by its post, its id (it keeps no such field).
        """
        return deliveryid.destination_of(self.delivery_id, self.fields.get("destination")) or ""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


class _Configs:
    """Callback configurations as a claim's read returns them (flat field, value lists), each read into a dict once
    for every job that comes with it; the dicts are shared, and only read."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._read: dict[tuple[bytes | str, ...], dict[str, str]] = {}

    def __call__(self, flat: Sequence[bytes | str]) -> dict[str, str]:
        key = tuple(flat)
        found = self._read.get(key)
        if found is None:
            if len(self._read) >= self._limit:
                self._read.clear()
            found = self._read[key] = _pairs(flat)
        return found


def _claimed_row(
    delivery_id: str, row: Sequence[Any], configs: Callable[[Sequence[bytes | str]], dict[str, str]] = _pairs
) -> Claimed:
    _, values, own, default, _destination = row
    return Claimed(delivery_id, dict(zip(DELIVERY_FIELDS, values, strict=True)), configs(own), configs(default))


class Sightings:
    """The account and destination of each instance whose job a read showed lately, by both.

    ``held_back`` names the instances of the given busy accounts and saturated destinations
    (an account's netloc, :func:`held_as`, or a netloc for every account) seen within ``fresh``
    seconds: the pop holds their jobs back unread. In memory, pure; ``clock`` is monotonic.
    """

    def __init__(self, fresh: float = SEEN_SECONDS, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.fresh = fresh
        self.clock = clock
        self._seen: dict[str, tuple[str, str, float]] = {}  # appid -> (account, destination, when)
        self._by: dict[str, set[str]] = {}  # "a:" account or "d:" destination -> appids
        self._pruned = clock()

    def saw(self, appid: str, account: str, destination: str) -> None:
        """A read showed a job of ``appid`` under ``account`` going to ``destination`` ('' if not read)."""
        now = self.clock()
        before = self._seen.get(appid)
        if before is not None and not destination and before[0] == account:
            destination = before[1]  # a read of the owner only says nothing of the address
        if before is None or before[:2] != (account, destination):
            if before is not None:
                self._unindex(appid, before)
            self._by.setdefault("a:" + account, set()).add(appid)
            if destination:
                self._by.setdefault("d:" + destination, set()).add(appid)
                self._by.setdefault("d:" + held_as(account, destination), set()).add(appid)
        self._seen[appid] = (account, destination, now)
        if now - self._pruned > 4 * self.fresh:
            self._prune(now)

    def held_back(self, saturated: Mapping[str, Hold], busy_accounts: Mapping[str, float]) -> dict[str, Hold]:
        """The instances seen lately whose account is busy or destination saturated, with when their jobs are due."""
        if not self._seen or not (saturated or busy_accounts):
            return {}
        cutoff = self.clock() - self.fresh
        due: dict[str, Hold] = {}
        accounts = {name: Hold(when) for name, when in busy_accounts.items()}
        for prefix, full in (("a:", accounts), ("d:", saturated)):
            for name, hold in full.items():
                for appid in self._by.get(prefix + name, ()):
                    if self._seen[appid][2] >= cutoff and (appid not in due or hold.last > due[appid].last):
                        due[appid] = hold
                        if len(due) >= _HELD_BACK_MOST:
                            return due
        return due

    def _unindex(self, appid: str, seen: tuple[str, str, float]) -> None:
        for name in ("a:" + seen[0], "d:" + seen[1], "d:" + held_as(seen[0], seen[1])):
            appids = self._by.get(name)
            if appids is not None:
                appids.discard(appid)
                if not appids:
                    del self._by[name]

    def _prune(self, now: float) -> None:
        """Forget instances not seen lately, or a worker would remember every instance it ever claimed."""
        cutoff = now - self.fresh
        for appid in [appid for appid, seen in self._seen.items() if seen[2] < cutoff]:
            self._unindex(appid, self._seen.pop(appid))
        self._pruned = now


class Claimer:
    """The claim of one queue, through a ``redis.asyncio`` client (bytes, not decoded)."""

    def __init__(
        self,
        redis: AsyncRedis,
        keys: KeySpace,
        queue_key: str,
        inflight_key: str,
        scheduled_key: str,
        lease_seconds: float,
        park_seconds: float = 120.0,
        disabled_recheck: float = 30.0,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.queue_key, self.inflight_key, self.scheduled_key = queue_key, inflight_key, scheduled_key
        self.lease_seconds = lease_seconds
        # How long a parked set is kept after its last write: longer than any job in it waits.
        self.park_seconds = park_seconds
        # How long a job of a disabled further destination waits before it is read again.
        self.disabled_recheck = disabled_recheck
        self._claim = register(redis, "queue_claim")
        self._read = register(redis, "queue_read")
        # appid -> account of the instances claimed lately: names a job's account callback hash
        # without a read (queue_read.lua checks it against the job's fields).
        self._accounts: dict[str, str] = {}
        # What reads showed lately of each instance: the pop holds back the jobs of those whose
        # account or destination has no free slot, unread.
        self.sightings = Sightings()
        self._configs = _Configs()
        # The ids of the last claim still leased but not read (their owners kept changing).
        self.unread: list[str] = []
        # How many ids the last claim popped: those it did not start went back without an attempt.
        self.popped = 0

    async def claim(
        self,
        count: int,
        worker_name: str,
        saturated: Mapping[str, Hold],
        busy_accounts: Mapping[str, float],
    ) -> list[Claimed]:
        """Up to ``count`` jobs popped, leased, read and started; :attr:`unread` the ones left leased."""
        self.unread = []
        self.popped = 0
        if count <= 0:
            return []
        now = time.time()
        args: list[Any] = [count, now + self.lease_seconds, repr(now), repr(random.random()), round(self.park_seconds)]
        script_keys = [self.queue_key, self.inflight_key, self.scheduled_key]
        parks = _Parks(script_keys)
        for appid, hold in self.sightings.held_back(saturated, busy_accounts).items():
            args.extend((appid, repr(hold.due), repr(hold.spread), parks.index(hold.park)))
        held_back, *popped = await self._claim(keys=script_keys, args=args)
        ids = [_text(i) for i in popped]
        self.popped = len(ids) + int(held_back)
        if not ids:
            return []
        owners = await self._owners(ids)
        claimed: list[Claimed] = []
        shown: set[str] = set()  # instances whose sighting this claim has noted
        for _ in range(_READ_TRIES):
            rows = await self._read_started(ids, owners, worker_name, saturated, busy_accounts)
            again: list[str] = []
            for row in rows:
                delivery_id = _text(row[0])
                if isinstance(row[1], list) or row[1] == 0:
                    # Started, or held back by the read: its owner is the one named. A further
                    # destination's job says nothing of where its instance's other jobs go.
                    appid, account, destination = owners[delivery_id]
                    if appid not in shown and not destination:
                        shown.add(appid)
                        self.sightings.saw(appid, account, _text(row[-1]))
                    if row[1] != 0:
                        claimed.append(_claimed_row(delivery_id, row, self._configs))
                    continue
                # The job's fields name another owner than its keys were named for: name them again.
                owner = (_text(row[1]), _text(row[2]), _text(row[3]))
                owners[delivery_id] = owner
                self._remember(owner[0], owner[1])
                again.append(delivery_id)
            ids = again
            if not ids:
                break
        else:
            self.unread = ids
        return claimed

    async def _owners(self, ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """Each claimed id's instance, account and further destination ('' for none), for the keys of its read.

        A delivery id names its instance (and a further destination's, its destination) and the
        instance's account is remembered from earlier claims; a ``dlv_`` id, or an instance not
        seen yet, is looked up in its fields (one pipeline for the batch), its destination with
        them. A job whose fields are gone is named for no owner: its read finds nothing and drops it.
        """
        owners: dict[str, tuple[str, str, str]] = {}
        unknown: list[str] = []
        for delivery_id in ids:
            named = deliveryid.parse_named(delivery_id)
            account = self._accounts.get(named[0]) if named else None
            if named and account is not None:
                owners[delivery_id] = (named[0], account, named[2] or "")
            else:
                unknown.append(delivery_id)
        if unknown:
            async with self.redis.pipeline(transaction=False) as pipe:
                for delivery_id in unknown:
                    pipe.hmget(self.keys.delivery(delivery_id), "appid", "account", "destination")
                found = await pipe.execute()
            for delivery_id, (appid, account, destination) in zip(unknown, found, strict=True):
                owner = (_text(appid or b""), _text(account or b""), _text(destination or b""))
                owners[delivery_id] = owner
                if appid and account:
                    self._remember(owner[0], owner[1])
        return owners

    def _remember(self, appid: str, account: str) -> None:
        if len(self._accounts) >= _ACCOUNTS_KEPT:
            # Rare and cheap: a worker past this many instances reads each owner once more.
            self._accounts.clear()
        self._accounts[appid] = account

    async def _read_started(
        self,
        ids: Sequence[str],
        owners: Mapping[str, tuple[str, str, str]],
        worker_name: str,
        saturated: Mapping[str, Hold],
        busy_accounts: Mapping[str, float],
    ) -> list[Any]:
        script_keys = [self.inflight_key, self.scheduled_key]
        args: list[Any] = [rq_now(), worker_name, len(DELIVERY_FIELDS), *DELIVERY_FIELDS, len(ids)]
        for delivery_id in ids:
            appid, account, destination = owners[delivery_id]
            script_keys.extend((self.keys.rq.job(delivery_id), self.keys.delivery(delivery_id)))
            if destination:
                script_keys.extend((self.keys.destination(destination), self.keys.destination_pace(destination)))
            else:
                script_keys.extend((self.keys.callback_instance(appid), self.keys.callback_account(account)))
            args.extend((delivery_id, appid, account, destination))
        args.extend((len(saturated), repr(time.time()), repr(random.random()), round(self.park_seconds),
                     repr(self.disabled_recheck)))  # fmt: skip
        parks = _Parks(script_keys)
        for host, hold in saturated.items():
            args.extend((host, repr(hold.due), repr(hold.spread), parks.index(hold.park)))
        for account, due in busy_accounts.items():
            args.extend((account, repr(due)))
        return cast(list[Any], await self._read(keys=script_keys, args=args))


class _Parks:
    """The parked sets a script call names, appended to its KEYS as they come."""

    def __init__(self, script_keys: list[str]) -> None:
        self.script_keys = script_keys
        self._index: dict[str, int] = {}

    def index(self, park: str) -> int:
        """The index in KEYS (from 1, as Lua counts) of the parked set ``park``, added when not there; 0 for none."""
        if not park:
            return 0
        found = self._index.get(park)
        if found is None:
            self.script_keys.append(park)
            found = self._index[park] = len(self.script_keys)
        return found
