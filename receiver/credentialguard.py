"""Credentials a server process has not seen valid: checked a few at a time, refused while they keep failing.

Receiver tokens (the receiver) and API keys (gateway calls, the console's
JSON API) are looked up in Redis. Made up by the thousand, they would cost a
look-up each and hold Redis connections that real requests need. A
:class:`CredentialGuard` (one per kind of credential; both share one
:class:`CheckRoom` and one in-memory storage) stands in front of those
look-ups, per client address (the connection's peer, or the client a proxy
of ``SVCGW_TRUSTED_PROXIES`` names: uvicorn has put it in place):

* **A credential known valid passes.** One that a check found valid in this
  process within :data:`KNOWN_SECONDS` goes to its check with nothing in its
  way, from any address, an address refused included. Only its digest is
  remembered, and only as "has been valid": it is still checked on every
  request (a revoked key fails on its next call), and forgotten when it fails.
* **Others are checked a few at a time.** A credential not known is checked
  only with a place in the room: at most :data:`PER_ADDRESS` of one client
  address at once, and at most half of ``SVCGW_REDIS_MAX_CONNECTIONS`` of all
  addresses together, so requests without a valid credential never hold most
  of the Redis connections. One that finds no place waits for one, in turn,
  up to ``SVCGW_REDIS_POOL_TIMEOUT``, then is refused (429, ``Retry-After: 1``).
* **Failures are counted per address**, in a window of this process
  (``limits``' sliding window counter, in memory;
  ``SVCGW_RECEIVER_FAILURES_PER_ADDRESS``, ``SVCGW_KEY_FAILURES_PER_ADDRESS``).
  While an address's window is full, its credentials not known are refused
  (429 and ``Retry-After``) before any look-up: a flood from one address
  costs Redis one window of failures, a few at a time, then nothing.

Why failures per address rather than a cache of bad credentials: made-up
credentials are new each time, so a cache of them never hits; and a count per
address refuses nobody else: a flood fills only the windows of the addresses
it comes from, and a credential that has worked passes even there. What it
costs: a real credential shown for the first time, from an address whose
window is full, waits for the window like the flood's.

Errors (in the one tree of ``svcgw.errors``, under ``Rejected``; each surface
answers it with its own 429 row)::

    Throttled    a credential refused unchecked: its address failed too often lately, or no place freed in time
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from limits import parse_many
from limits.storage import MemoryStorage
from limits.strategies import SlidingWindowCounterRateLimiter

from svcgw.errors import Rejected

__all__ = [
    "BUSY_SECONDS",
    "KNOWN",
    "KNOWN_SECONDS",
    "PER_ADDRESS",
    "CheckRoom",
    "CredentialGuard",
    "Throttled",
    "guards",
]

T = TypeVar("T")

log = logging.getLogger("svcgw")

# A credential found valid is let through unguarded this long (it is still checked every time).
KNOWN_SECONDS = 3600.0
# Digests remembered at most (some 200 bytes each): past it, the memory starts again.
KNOWN = 100_000
# Checks of credentials not known, of one client address at once.
PER_ADDRESS = 8
BUSY_SECONDS = 1  # Retry-After of a credential that found no place in time


class Throttled(Rejected):
    """A credential refused without being checked; ``retry_after`` whole seconds until one may be."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many failed credentials from this address, or too many at once; retry in {retry_after} s"
        )
        self.retry_after = retry_after


class _Share:
    """One address's places, and how many of its checks hold or wait for one."""

    __slots__ = ("places", "users")

    def __init__(self, places: int) -> None:
        self.places = asyncio.Semaphore(places)
        self.users = 0


class CheckRoom:
    """Places for checks of credentials not known: ``per_address`` of one address, ``total`` in all.

    A check that finds none waits for one, in turn (asyncio's semaphores serve their waiters in
    order), at most ``wait`` seconds; then :class:`Throttled`.
    """

    def __init__(self, total: int, per_address: int, wait: float) -> None:
        self._total = asyncio.Semaphore(total)
        self._per_address = per_address
        self._wait = wait
        self._shares: dict[str, _Share] = {}

    @contextlib.asynccontextmanager
    async def place(self, address: str) -> AsyncIterator[None]:
        share = self._shares.get(address)
        if share is None:
            share = self._shares[address] = _Share(self._per_address)
        share.users += 1
        try:
            await self._take(share)
            try:
                yield
            finally:
                self._total.release()
                share.places.release()
        finally:
            share.users -= 1
            if not share.users:
                del self._shares[address]

    async def _take(self, share: _Share) -> None:
        if not share.places.locked() and not self._total.locked():
            # Both free: taken without waiting (an acquire that need not wait does not suspend).
            await share.places.acquire()
            await self._total.acquire()
            return
        try:
            async with asyncio.timeout(self._wait):
                # The address's own place first: one address's flood waits in its own line.
                await share.places.acquire()
                try:
                    await self._total.acquire()
                except BaseException:
                    share.places.release()
                    raise
        except TimeoutError:
            raise Throttled(BUSY_SECONDS) from None


class _FailureWindow:
    """Failures per client address under the limits of ``rate`` (``limits`` notation), in this process."""

    def __init__(self, rate: str, kind: str, storage: MemoryStorage) -> None:
        self._items = parse_many(rate)
        self._rate = rate
        self._kind = kind
        self._limiter = SlidingWindowCounterRateLimiter(storage)

    def wait(self, address: str) -> int:
        """Whole seconds until ``address`` may fail again; 0 while its window has room."""
        for item in self._items:
            if not self._limiter.test(item, self._kind, address):
                reset = self._limiter.get_window_stats(item, self._kind, address).reset_time
                return max(1, math.ceil(reset - time.time()))
        return 0

    def failed(self, address: str) -> None:
        for item in self._items:
            self._limiter.hit(item, self._kind, address)
        # Said once each time the address fills its window: what follows is refused before it is counted.
        if self.wait(address):
            log.warning(
                "client %s sent too many %ss that are not valid (%s); the ones not found valid lately are refused "
                "until its window has room", address, self._kind, self._rate,
            )  # fmt: skip


class CredentialGuard:
    """The checks of one kind of credential (``kind`` names it, ``"API key"``), guarded as the module says."""

    def __init__(self, kind: str, failures: str, room: CheckRoom, storage: MemoryStorage) -> None:
        self._window = _FailureWindow(failures, kind, storage)
        self._room = room
        self._known: dict[str, float] = {}  # digest: until when (monotonic) it passes unguarded

    def known(self, name: str) -> bool:
        """Whether the credential of digest ``name`` was found valid lately."""
        until = self._known.get(name)
        return until is not None and until > time.monotonic()

    async def check(self, address: str, name: str, verify: Callable[[], Awaitable[T | None]]) -> T | None:
        """What ``verify`` found for the credential of digest ``name`` from ``address`` (None: not valid).

        :class:`Throttled` when it may not be checked now. An error of ``verify`` (Redis) is no
        failure of the credential: it passes through, counted nowhere.
        """
        if self.known(name):
            found = await verify()
            if found is None:
                self.forget(name)
                self._window.failed(address)
            return found
        self._refuse_if_full(address)
        async with self._room.place(address):
            # Again: the window may have filled while this check waited for its place.
            self._refuse_if_full(address)
            found = await verify()
        if found is None:
            self._window.failed(address)
        else:
            self.remember(name)
        return found

    def remember(self, name: str) -> None:
        """The credential of digest ``name`` was found valid."""
        if len(self._known) >= KNOWN:
            self._known.clear()
        self._known[name] = time.monotonic() + KNOWN_SECONDS

    def forget(self, name: str) -> None:
        self._known.pop(name, None)

    def _refuse_if_full(self, address: str) -> None:
        wait = self._window.wait(address)
        if wait:
            raise Throttled(wait)


def guards(receiver_failures: str, key_failures: str, total: int, wait: float) -> tuple[CredentialGuard, ...]:
    """The guards of receiver tokens and of API keys, sharing one room (``total`` places) and one storage."""
    room = CheckRoom(total, PER_ADDRESS, wait)
    storage = MemoryStorage()
    return (
        CredentialGuard("receiver token", receiver_failures, room, storage),
        CredentialGuard("API key", key_failures, room, storage),
    )
