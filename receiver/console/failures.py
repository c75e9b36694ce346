"""The failure windows of signing in: an attempt is counted before it is checked, and given back if right.

Every limit (``SVCGW_SIGNIN_FAILURES_PER_LOGIN``, ``..._PER_ADDRESS``, in
``limits`` notation) is a moving window kept in Redis as a sorted set of
attempts, one per login (or per device: ``receiver.console.session``) and
one per client address, under ``keys.signin_failures``, so every server
process shares them. One script (``svcgw/storage/lua/signin_reserve.lua``) checks
every window of an attempt and counts it in all of them in one step, before
any password is looked at: however many attempts arrive at once, no more of
them reach a password check than the smallest limit allows. A right password
gives its attempt back to the address, and clears its login's (or device's)
window; only failures stay counted.

A browser of the known-browser lane (``receiver.console.signin``) has its
login looked up and its attempt reserved in one round trip
(``signin_lane.lua``, which runs ``signin_reserve.lua`` itself): during a
flood every await of the event loop waits for a turn of the flood's
requests, so each round trip saved is a turn saved.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

from limits import parse_many

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["FailureWindows", "LaneLookup", "Limit", "Reservation", "limits_of"]


@dataclass(frozen=True)
class Limit:
    amount: int
    milliseconds: int

    @property
    def name(self) -> str:
        return f"{self.amount}-{self.milliseconds // 1000}"


def limits_of(text: str) -> tuple[Limit, ...]:
    return tuple(Limit(item.amount, item.get_expiry() * 1000) for item in parse_many(text))


@dataclass(frozen=True)
class Reservation:
    """One attempt counted in its windows, or refused (``wait`` > 0: whole seconds until one has room)."""

    member: str
    own: tuple[str, ...] = ()  # the login's (or device's) windows: cleared by a success
    by_address: tuple[str, ...] = ()  # the address's windows: the attempt is given back by a success
    wait: int = 0


@dataclass(frozen=True)
class LaneLookup:
    """What one round trip of the lane found: the login's account ('' for nobody's), and when it is the lane's
    account, its password hash, the password's version and the session epoch; ``reservation`` when the
    version was the cookie's and the attempt was counted (or refused: its ``wait``), else None."""

    account: str
    stored: str
    version: str
    session_epoch: str
    reservation: Reservation | None


class FailureWindows:
    def __init__(self, redis: Any, keys: KeySpace, per_login: str, per_address: str) -> None:
        self._redis = redis
        self._prefix = keys.signin_failures
        self._script = register(redis, "signin_reserve")
        self._lane = register(redis, "signin_lane")
        self._per_login = limits_of(per_login)
        self._per_address = limits_of(per_address)

    def _keys(self, limits: tuple[Limit, ...], kind: str, identity: str) -> tuple[str, ...]:
        return tuple(f"{self._prefix}:{kind}:{identity}:{limit.name}" for limit in limits)

    def _windows(self, who: tuple[str, str] | None, address: str) -> tuple[Reservation, list[str | int]]:
        """The reservation an attempt of ``who`` from ``address`` would make, and signin_reserve.lua's ARGV."""
        own = self._keys(self._per_login, *who) if who else ()
        by_address = self._keys(self._per_address, "address", address)
        limits = (self._per_login if who else ()) + self._per_address
        member = secrets.token_hex(12)
        args: list[str | int] = [member]
        for limit in limits:
            args += [limit.amount, limit.milliseconds]
        return Reservation(member, own, by_address), args

    async def reserve(self, who: tuple[str, str] | None, address: str) -> Reservation:
        """Count an attempt of ``who`` (``("login" | "device", digest)``; None: an API key) from ``address``."""
        reservation, args = self._windows(who, address)
        taken, wait = await self._script(keys=[*reservation.own, *reservation.by_address], args=args)
        return _taken(reservation, taken, wait)

    async def lane(
        self, login_key: str, account_key: str, lane: tuple[str, str], device: str, address: str
    ) -> LaneLookup:
        """Look up the login of ``login_key`` for the lane of ``lane`` (its account, whose hash is ``account_key``,
        and the password version its cookie carries) and, if it is that account's under that version,
        count the attempt of ``device`` (its digest) from ``address``: one round trip."""
        reservation, args = self._windows(("device", device), address)
        keys = [login_key, account_key, *reservation.own, *reservation.by_address]
        account, stored, version, epoch, taken, wait = await self._lane(keys=keys, args=[*lane, *args])
        found = _taken(reservation, taken, wait) if int(taken) >= 0 else None
        return LaneLookup(str(account), str(stored), str(version), str(epoch), found)

    async def succeeded(self, reservation: Reservation) -> None:
        """A right password (or key): the failures of its login or device cleared, its address's place given back."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if reservation.own:
                pipe.delete(*reservation.own)
            for key in reservation.by_address:
                pipe.zrem(key, reservation.member)
            await pipe.execute()


def _taken(reservation: Reservation, taken: Any, wait: Any) -> Reservation:
    """``reservation`` as signin_reserve.lua answered it: counted, or refused with its wait."""
    if not int(taken):
        return Reservation(reservation.member, wait=max(1, math.ceil(int(wait) / 1000)))
    return reservation
