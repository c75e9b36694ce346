"""Claiming jobs: their ids popped and leased, then what their attempts need read and each started.

Two scripts, so that each names every key it touches (docs/redis-layout.md, "Scripts and their
KEYS"): ``queue_claim.lua`` pops and leases up to a batch of ids; ``queue_read.lua`` reads and
starts them under keys named from those ids. A job's callback hashes are named by its instance,
which a delivery id holds (svcgw.deliveryid), and by its account, remembered from earlier claims
of the instance; the owner of a ``dlv_`` id or of an instance not seen yet costs one read before.
The read checks the owner it was named for against the job's own fields: a wrong memory costs a
second read, never another account's address.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from redis.asyncio import Redis as AsyncRedis
from rq.utils import utcformat

from svcgw import deliveryid, keys
from svcgw.scripts import register

__all__ = ["DELIVERY_FIELDS", "Claimed", "Claimer", "rq_now"]

# The delivery hash fields an attempt reads; ``chain`` (service events only) is read for the finish.
DELIVERY_FIELDS = ("appid", "account", "event_type", "body", "failures", "state", "attempts", "received_at", "chain")

# Reads of one claimed batch before a job whose owner keeps changing is given back.
_READ_TRIES = 3
# Instances whose account a claimer remembers (a few MB at most).
_ACCOUNTS_KEPT = 100_000


@dataclass(frozen=True)
class Claimed:
    """A claimed job with what its attempt needs, as read at claim time."""

    delivery_id: str
    fields: dict[str, bytes | None]  # DELIVERY_FIELDS; None where missing
    own: dict[str, str]  # the instance's callback configuration
    default: dict[str, str]  # the account's, read only when the instance has no address


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


def _claimed_row(delivery_id: str, row: Sequence[Any]) -> Claimed:
    _, values, own, default = row
    return Claimed(delivery_id, dict(zip(DELIVERY_FIELDS, values, strict=True)), _pairs(own), _pairs(default))


class Claimer:
    """The claim of one queue, through a ``redis.asyncio`` client (bytes, not decoded)."""

    def __init__(
        self, redis: AsyncRedis, queue_key: str, inflight_key: str, scheduled_key: str, lease_seconds: float
    ) -> None:
        self.redis = redis
        self.queue_key, self.inflight_key, self.scheduled_key = queue_key, inflight_key, scheduled_key
        self.lease_seconds = lease_seconds
        self._claim = register(redis, "queue_claim")
        self._read = register(redis, "queue_read")
        # appid -> account of the instances claimed lately: names a job's account callback hash
        # without a read (queue_read.lua checks it against the job's fields).
        self._accounts: dict[str, str] = {}
        # The ids of the last claim still leased but not read (their owners kept changing).
        self.unread: list[str] = []
        # How many ids the last claim popped: those it did not start went back without an attempt.
        self.popped = 0

    async def claim(
        self,
        count: int,
        worker_name: str,
        saturated: Mapping[str, float],
        busy_accounts: Mapping[str, float],
    ) -> list[Claimed]:
        """Up to ``count`` jobs popped, leased, read and started; :attr:`unread` the ones left leased."""
        self.unread = []
        self.popped = 0
        if count <= 0:
            return []
        popped = await self._claim(
            keys=[self.queue_key, self.inflight_key], args=[count, time.time() + self.lease_seconds]
        )
        ids = [_text(i) for i in cast(list[Any], popped)]
        self.popped = len(ids)
        if not ids:
            return []
        owners = await self._owners(ids)
        claimed: list[Claimed] = []
        for _ in range(_READ_TRIES):
            rows = await self._read_started(ids, owners, worker_name, saturated, busy_accounts)
            again: list[str] = []
            for row in rows:
                delivery_id = _text(row[0])
                if isinstance(row[1], list):
                    claimed.append(_claimed_row(delivery_id, row))
                    continue
                # The job's fields name another owner than its keys were named for: name them again.
                owner = (_text(row[1]), _text(row[2]))
                owners[delivery_id] = owner
                self._remember(*owner)
                again.append(delivery_id)
            ids = again
            if not ids:
                break
        else:
            self.unread = ids
        return claimed

    async def _owners(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Each claimed id's instance and account, for the keys of its read.

        A delivery id names its instance and the instance's account is remembered from earlier
        claims; a ``dlv_`` id, or an instance not seen yet, is looked up in its fields (one
        pipeline for the batch). A job whose fields are gone is named for no owner: its read
        finds nothing and drops it.
        """
        owners: dict[str, tuple[str, str]] = {}
        unknown: list[str] = []
        for delivery_id in ids:
            named = deliveryid.parse(delivery_id)
            account = self._accounts.get(named[0]) if named else None
            if named and account is not None:
                owners[delivery_id] = (named[0], account)
            else:
                unknown.append(delivery_id)
        if unknown:
            async with self.redis.pipeline(transaction=False) as pipe:
                for delivery_id in unknown:
                    pipe.hmget(keys.delivery(delivery_id), "appid", "account")
                found = await pipe.execute()
            for delivery_id, (appid, account) in zip(unknown, found, strict=True):
                owner = (_text(appid or b""), _text(account or b""))
                owners[delivery_id] = owner
                if appid and account:
                    self._remember(*owner)
        return owners

    def _remember(self, appid: str, account: str) -> None:
        if len(self._accounts) >= _ACCOUNTS_KEPT:
            # Rare and cheap: a worker past this many instances reads each owner once more.
            self._accounts.clear()
        self._accounts[appid] = account

    async def _read_started(
        self,
        ids: Sequence[str],
        owners: Mapping[str, tuple[str, str]],
        worker_name: str,
        saturated: Mapping[str, float],
        busy_accounts: Mapping[str, float],
    ) -> list[Any]:
        script_keys = [self.inflight_key, self.scheduled_key]
        args: list[Any] = [rq_now(), worker_name, len(DELIVERY_FIELDS), *DELIVERY_FIELDS, len(ids)]
        for delivery_id in ids:
            appid, account = owners[delivery_id]
            script_keys.extend(
                (
                    keys.rq_job(delivery_id),
                    keys.delivery(delivery_id),
                    keys.callback_instance(appid),
                    keys.callback_account(account),
                )
            )
            args.extend((delivery_id, appid, account))
        args.append(len(saturated))
        for host, due in saturated.items():
            args.extend((host, repr(due)))
        for account, due in busy_accounts.items():
            args.extend((account, repr(due)))
        return cast(list[Any], await self._read(keys=script_keys, args=args))


def rq_now() -> str:
    """Now, as RQ writes times into a job hash."""
    return utcformat(datetime.now(UTC).replace(tzinfo=None))
