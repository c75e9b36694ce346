"""Signing in with a login and password: failure limits, and argon2 off the event loop.

Failed attempts are counted per login and per client address, each in a
moving window of ``limits`` kept in Redis (``SVCGW_SIGNIN_FAILURES_PER_LOGIN``,
``SVCGW_SIGNIN_FAILURES_PER_ADDRESS``; keys under ``keys.SIGNIN_FAILURES``),
so every server process shares the count. Only failures count: an office
behind one address signs in as often as it needs. While either window is
full, an attempt is refused before any password is looked at, with the same
generic answer as a wrong password, and how long to wait. A login nobody
has is counted like any other, so the limits behave the same whether a
login exists or not; a successful sign-in clears its login's window.

argon2 is slow on purpose: every verification and hash runs in a worker
thread, at most :data:`HASHING_AT_ONCE` at a time per process (each takes 64
MiB), so a storm of sign-ins queues here instead of stalling the gateway's
event loop or exhausting memory. An unknown login, or one without a
password, still costs one verification (``svcgw.passwords.verify_nothing``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
from limits import RateLimitItem, parse_many
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from svcgw import keys, passwords
from svcgw.credentials import Credentials, LoginRejected, normalise_login
from svcgw.store import digest
from svcgw.threads import in_thread

if TYPE_CHECKING:
    from receiver.services import Services

__all__ = ["HASHING_AT_ONCE", "Attempt", "PasswordSignIn"]

HASHING_AT_ONCE = 2  # argon2 runs per process; two cores, 64 MiB each

T = TypeVar("T")
Window = tuple[RateLimitItem, tuple[str, ...]]  # a limit and whose failures it counts


@dataclass(frozen=True)
class Attempt:
    """The outcome of one sign-in: the account, or a refusal (``retry_after`` > 0: over a limit)."""

    account: str | None
    retry_after: int = 0


class PasswordSignIn:
    def __init__(self, services: Services) -> None:
        self.credentials = Credentials(services.text_redis)
        # limits' own scripts on the service's Redis (its bytes client's pool: Sentinel included).
        storage = RedisStorage(
            "async+redis://",
            implementation="redispy",
            key_prefix=keys.SIGNIN_FAILURES,
            connection_pool=services.redis.connection_pool,  # type: ignore[arg-type]  # typed for URL options only
        )
        self._windows = MovingWindowRateLimiter(storage)
        self._per_login = parse_many(services.settings.signin_failures_per_login)
        self._per_address = parse_many(services.settings.signin_failures_per_address)
        self._hashing = anyio.Semaphore(HASHING_AT_ONCE)

    # --- the work of argon2, in a thread ------------------------------------------------
    async def _in_thread(self, work: Callable[[], T]) -> T:
        async with self._hashing:
            return await in_thread(work, abandon_on_cancel=False)

    async def hash_password(self, password: str) -> str:
        return await self._in_thread(lambda: passwords.hash_password(password))

    # --- signing in ---------------------------------------------------------------------
    async def attempt(self, login: str, password: str, address: str) -> Attempt:
        """Check ``login`` and ``password`` coming from ``address``, within the failure limits."""
        windows = self._windows_of(login, address)
        wait = await self._wait(windows)
        if wait:
            return Attempt(None, wait)
        account, stored = await self.credentials.lookup(login) or ("", "")
        if stored:
            ok = await self._in_thread(lambda: passwords.verify(stored, password))
        else:
            await self._in_thread(passwords.verify_nothing)
            ok = False
        if not ok:
            for item, identity in windows:
                await self._windows.hit(item, *identity)
            return Attempt(None)
        for item, identity in windows[: len(self._per_login)]:
            await self._windows.clear(item, *identity)
        if passwords.needs_rehash(stored):
            await self.credentials.replace_hash(account, stored, await self.hash_password(password))
        return Attempt(account)

    async def check_current(self, account: str, password: str, address: str) -> Attempt:
        """The account's own password, asked again before it is changed; counted like a sign-in."""
        login = await self.credentials.login_of(account)
        if login is None:
            return Attempt(None)
        attempt = await self.attempt(login, password, address)
        return attempt if attempt.account == account else Attempt(None, attempt.retry_after)

    async def key_failed(self, address: str) -> None:
        """A wrong API key given to sign in: counted against the address."""
        for item in self._per_address:
            await self._windows.hit(item, "address", address)

    async def address_wait(self, address: str) -> int:
        return await self._wait([(item, ("address", address)) for item in self._per_address])

    # --- the windows ----------------------------------------------------------------------
    def _windows_of(self, login: str, address: str) -> list[Window]:
        """The login's windows first, then the address's."""
        try:
            who = normalise_login(login)
        except LoginRejected:
            who = login.strip().casefold()
        by_login: tuple[str, ...] = ("login", digest(who))
        by_address: tuple[str, ...] = ("address", address)
        return [(item, by_login) for item in self._per_login] + [(item, by_address) for item in self._per_address]

    async def _wait(self, windows: Sequence[Window]) -> int:
        """Whole seconds until every window has room again (at least 1 when one is full); 0 when all have."""
        wait = 0
        for item, identity in windows:
            if not await self._windows.test(item, *identity):
                stats = await self._windows.get_window_stats(item, *identity)
                wait = max(wait, 1, math.ceil(stats.reset_time - time.time()))
        return wait
