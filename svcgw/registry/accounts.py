"""Accounts in Redis: name, device quota, validity, console login, and the operations denied them.

Two lists of denied operations: the operator's (``svcgw accounts deny``) and
the account's own (the console). They are separate so that nothing the
account does can lift an operator's denial; the gateway refuses both.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import date

from redis.exceptions import WatchError

from svcgw.errors import NotFound, Rejected
from svcgw.registry.base import StoreBase, new_id
from svcgw.registry.credentials import LoginTaken, normalise_login

__all__ = ["Account", "AccountStore", "Denials", "OperatorDenied", "normalise_operation"]


class OperatorDenied(Rejected, ValueError):
    """The account asked to allow operations that the operator denied it; nothing was changed."""

    def __init__(self, operations: Iterable[str]) -> None:
        self.operations = sorted(operations)
        super().__init__(
            f"{', '.join(self.operations)}: denied by the operator; only the operator can allow "
            f"{'it' if len(self.operations) == 1 else 'them'} again"
        )


@dataclass(frozen=True)
class Account:
    id: str
    name: str
    devices: int | None
    valid_until: str | None
    created_at: float
    login: str | None = None  # the console login, as the operator wrote it

    def expired(self, today: date | None = None) -> bool:
        if not self.valid_until:
            return False
        return (today or date.today()) > date.fromisoformat(self.valid_until)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Denials:
    """An account's denied operations: the operator's list and the account's own.

    The gateway refuses an operation in either (:meth:`Store.refused`); the
    console changes only ``own`` and shows ``operator`` read-only.
    """

    operator: frozenset[str]
    own: frozenset[str]

    @property
    def all(self) -> list[str]:
        return sorted(self.operator | self.own)

    def as_dict(self) -> dict[str, list[str]]:
        return {"denied": self.all, "own": sorted(self.own), "by_operator": sorted(self.operator)}


class AccountStore(StoreBase):
    """Accounts, their logins and denied operations: a part of :class:`svcgw.registry.store.Store`."""

    async def create_account(
        self, name: str, devices: int | None = None, valid_until: str | None = None, *, login: str | None = None
    ) -> Account:
        """A new account; with ``login``, the name it signs in to the console with.

        A login is unique without regard to case (``svcgw.registry.credentials``): the
        check and the claim are one ``WATCH`` transaction with the account's
        creation, so two accounts never get one login and a refused one
        (``LoginTaken``) leaves nothing behind.
        """
        if not name.strip():
            raise ValueError("an account needs a name")
        if devices is not None and devices < 0:
            raise ValueError("the device quota cannot be negative")
        if valid_until:
            date.fromisoformat(valid_until)  # raises ValueError with the bad value
        normalised = normalise_login(login) if login is not None else None
        account_id = new_id("acc_")
        now = time.time()
        mapping = {"name": name, "created_at": repr(now)}
        if devices is not None:
            mapping["devices"] = str(devices)
        if valid_until:
            mapping["valid_until"] = valid_until
        if login is not None:
            mapping["login"] = login.strip()
        async with self.redis.pipeline(transaction=True) as pipe:
            if normalised is not None:
                await pipe.watch(self.keys.login(normalised))
                # GET, not EXISTS: a Cluster client's pipeline sends EXISTS (split by slot) only once buffered.
                if await pipe.get(self.keys.login(normalised)) is not None:
                    raise LoginTaken(login or "")
                pipe.multi()
                pipe.set(self.keys.login(normalised), account_id)
            pipe.hset(self.keys.account(account_id), mapping=mapping)
            pipe.sadd(self.keys.accounts, account_id)
            try:
                await pipe.execute()
            except WatchError:
                raise LoginTaken(login or "") from None
        return Account(account_id, name, devices, valid_until or None, now, mapping.get("login"))

    async def set_login(self, account_id: str, login: str) -> Account:
        """Give an account (a new) console login; its old login, if any, stops naming it.

        Unique without regard to case, as at creation: one ``WATCH``
        transaction checks and claims the new login and frees the old one,
        so a refused login (``LoginTaken``) changes nothing. The password and
        the sessions are left as they are.
        """
        normalised = normalise_login(login)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(self.keys.login(normalised), self.keys.account(account_id))
            data = await pipe.hgetall(self.keys.account(account_id))
            if not data:
                raise NotFound(f"no account {account_id!r}", what="account")
            holder = await pipe.get(self.keys.login(normalised))
            if holder is not None and holder != account_id:
                raise LoginTaken(login)
            old = data.get("login")
            pipe.multi()
            if old and normalise_login(old) != normalised:
                pipe.delete(self.keys.login(normalise_login(old)))
            pipe.set(self.keys.login(normalised), account_id)
            pipe.hset(self.keys.account(account_id), "login", login.strip())
            try:
                await pipe.execute()
            except WatchError:
                raise LoginTaken(login) from None
        return await self.get_account(account_id)

    async def update_account(
        self, account_id: str, *, devices: int | None = None, valid_until: str | None = None
    ) -> Account:
        """Change an account's device quota and its last day of validity (what is None is kept).

        A lower quota does not remove instances; it refuses new ones while the account has as many.
        The account must exist: its hash is changed in one ``WATCH`` transaction, never made anew.
        """
        if devices is not None and devices < 0:
            raise ValueError("the device quota cannot be negative")
        if valid_until is not None:
            date.fromisoformat(valid_until)  # raises ValueError with the bad value
        mapping: dict[str, str] = {}
        if devices is not None:
            mapping["devices"] = str(devices)
        if valid_until is not None:
            mapping["valid_until"] = valid_until
        key = self.keys.account(account_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    if not await pipe.exists(key):
                        raise NotFound(f"no account {account_id!r}", what="account")
                    pipe.multi()
                    if mapping:
                        pipe.hset(key, mapping=mapping)
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        return await self.get_account(account_id)

    async def get_account(self, account_id: str) -> Account:
        data = await self.redis.hgetall(self.keys.account(account_id))
        if not data:
            raise NotFound(f"no account {account_id!r}", what="account")
        devices = data.get("devices")
        return Account(
            id=account_id,
            name=data.get("name", ""),
            devices=int(devices) if devices not in (None, "") else None,
            valid_until=data.get("valid_until") or None,
            created_at=float(data.get("created_at", "0")),
            login=data.get("login") or None,
        )

    async def list_accounts(self) -> list[Account]:
        ids = sorted(await self.redis.smembers(self.keys.accounts))
        return [await self.get_account(account_id) for account_id in ids]

    async def deny(self, account_id: str, operations: Iterable[str]) -> set[str]:
        await self.get_account(account_id)
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.sadd(self.keys.account_denied(account_id), *ops)
        return await self.denied(account_id)

    async def allow(self, account_id: str, operations: Iterable[str]) -> set[str]:
        await self.get_account(account_id)
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.srem(self.keys.account_denied(account_id), *ops)
        return await self.denied(account_id)

    async def denied(self, account_id: str) -> set[str]:
        """The operator's list (``svcgw accounts deny``), which ``deny`` and ``allow`` change."""
        return set(await self.redis.smembers(self.keys.account_denied(account_id)))

    # The account's own list, managed in the console. The operator's list is
    # separate so that nothing the account does can lift an operator's denial.
    async def denials(self, account_id: str) -> Denials:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(self.keys.account_denied(account_id))
            pipe.smembers(self.keys.account_own_denied(account_id))
            operator, own = await pipe.execute()
        return Denials(frozenset(operator), frozenset(own))

    async def deny_own(self, account_id: str, operations: Iterable[str]) -> Denials:
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.sadd(self.keys.account_own_denied(account_id), *ops)
        return await self.denials(account_id)

    async def allow_own(self, account_id: str, operations: Iterable[str]) -> Denials:
        """Take operations off the account's own list; ``OperatorDenied`` (nothing changed) for the operator's.

        Names match case-insensitively, as at the gateway: allowing
        ``message/sendtext`` lifts an own denial of ``message/sendText``.
        """
        wanted = {normalise_operation(op).lower() for op in operations}
        current = await self.denials(account_id)
        by_operator = {op for op in current.operator if op.lower() in wanted}
        if by_operator:
            raise OperatorDenied(by_operator)
        lifted = [op for op in current.own if op.lower() in wanted]
        if lifted:
            await self.redis.srem(self.keys.account_own_denied(account_id), *lifted)
        return await self.denials(account_id)

    async def refused(self, account_id: str) -> set[str]:
        """Every operation the gateway refuses the account (both lists), in one read."""
        return set(
            await self.redis.sunion([self.keys.account_denied(account_id), self.keys.account_own_denied(account_id)])
        )


def normalise_operation(operation: str) -> str:
    """``/svc/api/message/sendText`` and ``message/sendText`` name the same operation."""
    op = operation.strip().strip("/")
    for prefix in ("svc/api/", "api/", "svc/"):
        if op.startswith(prefix):
            op = op[len(prefix) :]
            break
    if op.count("/") != 1 or not all(op.split("/")):
        raise ValueError(f"an operation looks like 'module/action', got {operation!r}")
    return op
