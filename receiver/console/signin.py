"""Signing in with a login and password: failure limits, room for password checks, argon2 off the loop.

Every attempt is first counted in its failure windows (``receiver.console.failures``):
per login, or per device when the browser shows the account's device cookie
(``receiver.console.session``), and per client address (``receiver.http.client_address``:
the peer, or what a trusted proxy says it is). While a window is full the
attempt is refused before any password is looked at, with the same generic
answer as a wrong password, and how long to wait. A login nobody has is
counted like any other, so the limits behave the same whether a login exists
or not. A right password gives its attempt back.

argon2 is slow on purpose: every verification and hash runs in a worker
thread, at most :data:`HASHING_AT_ONCE` at a time per process (each takes 64
MiB). In front of them, a process holds at most :data:`WAITING_AT_ONCE`
attempts waiting or running, and one client address at most
:data:`PER_ADDRESS` of them, its checks one at a time: an attempt that
finds no room is refused at once (429, ``Retry-After``), so a flood from one
address neither queues without bound nor holds more than one of the
threads, and someone else's sign-in waits for one check at most. An unknown login,
or one without a password, still costs one verification
(``svcgw.registry.passwords.verify_nothing``).

That room is everyone's, so a flood from many addresses fills it. A browser
that shows a device cookie of the very login it signs in to (it signed in
there before: ``receiver.console.session``) has a lane of its own instead:
:data:`LANE_AT_ONCE` places per process, :data:`PER_ACCOUNT` of one account,
with an argon2 thread of their own (:data:`LANE_HASHING`), and first call on
the cores (:class:`Hashing`): while a check of the lane waits or runs, the
room starts no new one past :data:`HASHING_AT_ONCE` - :data:`LANE_HASHING`
(never fewer than one, so one account's own sign-ins cannot stop everyone
else's). Only a cookie this service signed opens it, and only for the account
it names (:class:`Lane`): the lane's place is taken for the cookie's account,
the login is looked up, and an attempt at any other login, or under another
password version than the cookie's, leaves the lane for the room. A flood of
sign-ins without such a cookie never reaches it.

What a flood costs the lane is turns of the event loop, not cores: every
await of a sign-in on the server's loop waits until that loop has read and
answered the flood's requests of the turn (400 addresses sending at once: a
turn of half a second to two seconds on two busy cores). So the lane's work
runs on a loop of its own (``receiver.console.laneloop``: its own thread,
Redis client and argon2 thread), handed over once: its look-up and
reservation in one round trip (``FailureWindows.lane``, which also reads the
session epoch the new session is made under), its check, and then the new
session's write (:data:`AfterLane`). Its places and turns
(:attr:`PasswordSignIn.lane`) are taken and given back on that loop only; the
count of its checks that makes the room hold back (:class:`Hashing`) on the
server's.

An API key given to sign in has a room of its own too (:data:`KEYS_AT_ONCE`,
:data:`PER_ADDRESS` of one address; no argon2, but Redis look-ups), which a
key found valid lately (``receiver.credentialguard``) does not need.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from svcgw.digests import digest
from svcgw.registry import passwords
from svcgw.registry.credentials import Credentials, LoginRejected, normalise_login
from svcgw.shards.connections import async_shard_client
from svcgw.threads import in_thread

from .failures import FailureWindows, Reservation
from .laneloop import LaneLoop

if TYPE_CHECKING:
    from receiver.services import Services

__all__ = [
    "BUSY_SECONDS",
    "HASHING_AT_ONCE",
    "KEYS_AT_ONCE",
    "LANE_AT_ONCE",
    "LANE_HASHING",
    "PER_ACCOUNT",
    "PER_ADDRESS",
    "WAITING_AT_ONCE",
    "Hashing",
    "Lane",
    "PasswordSignIn",
    "Room",
    "SignInOutcome",
]

HASHING_AT_ONCE = 2  # argon2 runs per process; two cores, 64 MiB each
WAITING_AT_ONCE = 8 * HASHING_AT_ONCE  # attempts waiting for a check or in one, per process
PER_ADDRESS = HASHING_AT_ONCE  # of those, one client address's at most: others wait one check at most
BUSY_SECONDS = 1  # Retry-After of an attempt that found no room
# The lane of browsers that signed in to their login before: places per process, one account's at
# most, and argon2 runs of its own, ahead of the room's (Hashing).
LANE_AT_ONCE = 8
PER_ACCOUNT = 2
LANE_HASHING = 1
KEYS_AT_ONCE = WAITING_AT_ONCE  # API keys given to sign in, being checked, per process

T = TypeVar("T")
# A login's account, its password hash ('' when it has none) and that password's version.
_Found = tuple[str, str, str]
# An account and its password's version: the device its cookie proves on this request, or None.
DeviceOf = Callable[[str, str], str | None]
# What a right password in the lane leads to, made on the lane's loop with its Redis client (redis, account, the
# session epoch its look-up read): the new session, written with no turn of the server's loop to wait for.
AfterLane = Callable[[Any, str, str], Awaitable[Any]]


def _no_device(account: str, password_version: str) -> str | None:
    return None


class Lane(NamedTuple):
    """What a device cookie this service signed says (``Sessions.lane_of``): the lane of its account's sign-ins."""

    account: str
    device: str
    password_version: str  # the version the cookie was made under: the lane is its only while it is current


@dataclass(frozen=True)
class SignInOutcome:
    """The outcome of one sign-in: the account, or a refusal (``retry_after`` > 0: over a limit)."""

    account: str | None
    retry_after: int = 0
    password_version: str = ""  # of the password that signed in: what a new device cookie carries
    # What ``after_lane`` made of a right password in the lane, on the lane's loop (the new session); else None.
    made: Any = None


class _Share:
    """The places of one client address (or account), and its turn at the checks (one at a time)."""

    __slots__ = ("places", "turn")

    def __init__(self) -> None:
        self.places = 0
        self.turn = asyncio.Lock()  # taken at once when free: no turn of the loop lost (an anyio lock yields)


class Room:
    """Places for attempts waiting for a check or in one, in this process, bounded per client (``who``); used on
    one event loop.

    ``who`` is the client address in the room everyone shares, the account in the lane of its devices.
    """

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self.held = 0
        self._shares: dict[str, _Share] = {}

    def take(self, who: str) -> bool:
        share = self._shares.get(who)
        if self.held >= self.total or (share is not None and share.places >= self.per_address):
            return False
        if share is None:
            share = self._shares[who] = _Share()
        self.held += 1
        share.places += 1
        return True

    def turn(self, who: str) -> asyncio.Lock:
        """Held while one of ``who``'s attempts waits for a check or runs it (``who`` must hold a place)."""
        return self._shares[who].turn

    def give_back(self, who: str) -> None:
        self.held -= 1
        share = self._shares[who]
        share.places -= 1
        if not share.places:
            del self._shares[who]


class Hashing:
    """The argon2 runs of one process: the room's, at most ``room`` at once, and the lane's, ``lane``, first.

    While a check of the lane waits or runs, the room starts no run past ``room - lane`` (at least
    one): runs under way finish, and the room's next waits (in turn) until the lane's is done. The
    lane's runs themselves are bounded by its own threads (``LaneLoop.in_thread``); here they are counted.
    """

    def __init__(self, room: int, lane: int) -> None:
        self._room = room
        self._lane_places = lane
        self.room_running = 0
        self.lane_wanting = 0  # checks of the lane waiting for a run or in one
        self._room_waiting: collections.deque[asyncio.Event] = collections.deque()

    def room_limit(self) -> int:
        """How many runs the room may have now."""
        return max(1, self._room - self._lane_places) if self.lane_wanting else self._room

    @contextlib.asynccontextmanager
    async def for_room(self) -> AsyncIterator[None]:
        if self._room_waiting or self.room_running >= self.room_limit():
            turn = asyncio.Event()
            self._room_waiting.append(turn)
            try:
                await turn.wait()  # set with its run counted (:meth:`_start_room`)
            except BaseException:
                if turn.is_set():
                    self.room_running -= 1
                    self._start_room()
                else:
                    self._room_waiting.remove(turn)
                raise
        else:
            self.room_running += 1
        try:
            yield
        finally:
            self.room_running -= 1
            self._start_room()

    @contextlib.asynccontextmanager
    async def for_lane(self) -> AsyncIterator[None]:
        """Held while a check of the lane waits or runs (its run is the lane's own: ``LaneLoop.in_thread``)."""
        self.lane_wanting += 1
        try:
            yield
        finally:
            self.lane_wanting -= 1
            self._start_room()

    def _start_room(self) -> None:
        """The room's waiters that fit now, in turn."""
        while self._room_waiting and self.room_running < self.room_limit():
            self.room_running += 1
            self._room_waiting.popleft().set()


class PasswordSignIn:
    def __init__(self, services: Services) -> None:
        self.credentials = Credentials(services.text_redis, services.keys)
        self.settings = settings = services.settings
        self.keys = services.keys
        self.windows = FailureWindows(
            services.text_redis, services.keys, settings.signin_failures_per_login, settings.signin_failures_per_address
        )
        self.room = Room(WAITING_AT_ONCE, PER_ADDRESS)
        self.lane = Room(LANE_AT_ONCE, PER_ACCOUNT)
        self.keys_room = Room(KEYS_AT_ONCE, PER_ADDRESS)
        self.hashing = Hashing(HASHING_AT_ONCE, LANE_HASHING)
        shard = settings.shard_layout.shards[0]
        self.lane_loop = LaneLoop(lambda: async_shard_client(settings, shard, decode=True), LANE_HASHING)
        services.closing.append(self.lane_loop.aclose)
        self._lane_side: _LaneSide | None = None  # built and used on the lane's loop only

    # --- the work of argon2, in a thread ------------------------------------------------
    async def _in_thread(self, work: Callable[[], T], lane: bool = False) -> T:
        if lane:
            return await self.lane_loop.in_thread(work)
        async with self.hashing.for_room():
            return await in_thread(work, abandon_on_cancel=False)

    async def hash_password(self, password: str) -> str:
        return await self._in_thread(lambda: passwords.hash_password(password))

    # --- signing in ---------------------------------------------------------------------
    async def attempt(
        self, login: str, password: str, address: str, device_of: DeviceOf = _no_device, lane: Lane | None = None,
        after_lane: AfterLane | None = None,
    ) -> SignInOutcome:  # fmt: skip
        """Check ``login`` and ``password`` coming from ``address``, within the room and the failure limits.

        ``lane``: what a device cookie the browser shows says (``Sessions.lane_of``); the attempt
        takes the lane if the login is that account's, under the password version of the cookie, and
        a right password there is followed by ``after_lane`` on the lane's loop (``SignInOutcome.made``).
        """
        found: _Found | None = None
        looked_up = False
        if lane is not None:
            async with self.hashing.for_lane():
                laned = await self.lane_loop.run(
                    lambda redis: self._in_lane(redis, login, password, address, lane, after_lane)
                )
            if isinstance(laned, SignInOutcome):
                return laned
            if laned is not None:
                found, looked_up = laned[0], True
        if not self.room.take(address):
            return SignInOutcome(None, BUSY_SECONDS)
        try:
            if not looked_up:
                found = await self.credentials.lookup(login)
            return await self._attempt(found, login, password, address, device_of)
        finally:
            self.room.give_back(address)

    async def _in_lane(
        self, redis: Any, login: str, password: str, address: str, lane: Lane, after: AfterLane | None = None
    ) -> SignInOutcome | tuple[_Found | None] | None:
        """On the lane's loop: the attempt's outcome if it stays in the lane; else what the look-up found (a
        tuple), or None when the room must look the login up itself (the lane full, or another account's login)."""
        if self._lane_side is None:
            self._lane_side = _LaneSide(redis, self)
        side = self._lane_side
        if not self.lane.take(lane.account):
            return None
        try:
            looked = await self._lane_lookup(side.windows, login, lane, address)
            if looked is None:
                return None
            found, reservation, epoch = looked
            if reservation is None:
                return (found,)
            outcome = await self._check(found, password, reservation, side.windows, side.credentials, lane)
            if outcome.account is None or after is None:
                return outcome
            return SignInOutcome(outcome.account, password_version=outcome.password_version,
                                 made=await after(redis, outcome.account, epoch))  # fmt: skip
        finally:
            self.lane.give_back(lane.account)

    async def _lane_lookup(
        self, windows: FailureWindows, login: str, lane: Lane, address: str
    ) -> tuple[_Found | None, Reservation | None, str] | None:
        """The lane's look-up and reservation in one round trip: what the login is (None: nobody's), the
        reservation when the attempt stays in the lane, and the session epoch. None: the login is another
        account's, and the room looks it up itself."""
        try:
            normalised = normalise_login(login)
        except LoginRejected:
            return None, None, ""  # nobody's login: the room counts it under what was sent
        keys = self.credentials.keys
        looked = await windows.lane(
            keys.login(normalised), keys.account(lane.account), (lane.account, lane.password_version),
            digest(lane.device), address,
        )  # fmt: skip
        if not looked.account:
            return None, None, ""
        if looked.account != lane.account:
            return None
        return (looked.account, looked.stored, looked.version), looked.reservation, looked.session_epoch

    async def _attempt(
        self, found: _Found | None, login: str, password: str, address: str, device_of: DeviceOf
    ) -> SignInOutcome:
        """The attempt once it holds its place in the room."""
        account, _, version = found or ("", "", "")
        device = device_of(account, version) if account else None
        who = ("device", digest(device)) if device else ("login", digest(_normalised(login)))
        # Counted before the check, and before waiting for it.
        reservation = await self.windows.reserve(who, address)
        return await self._check(found, password, reservation, self.windows, self.credentials, address=address)

    async def _check(
        self, found: _Found | None, password: str, reservation: Reservation, windows: FailureWindows,
        credentials: Credentials, lane: Lane | None = None, *, address: str = "",
    ) -> SignInOutcome:  # fmt: skip
        """The password checked, its attempt counted (``reservation``), in its turn of the lane or the room;
        ``windows`` and ``credentials`` of the loop it runs on."""
        if reservation.wait:
            return SignInOutcome(None, reservation.wait)
        account, stored, version = found or ("", "", "")
        in_lane = lane is not None
        turn = self.lane.turn(lane.account) if lane is not None else self.room.turn(address)
        async with turn:
            if stored:
                ok = await self._in_thread(lambda: passwords.verify(stored, password), in_lane)
            else:
                await self._in_thread(passwords.verify_nothing, in_lane)
                ok = False
        if not ok:
            return SignInOutcome(None)
        await windows.succeeded(reservation)
        if passwords.needs_rehash(stored):
            rehashed = await self._in_thread(lambda: passwords.hash_password(password), in_lane)
            await credentials.replace_hash(account, stored, rehashed)
        return SignInOutcome(account, password_version=version)

    async def check_current(
        self, account: str, password: str, address: str, device_of: DeviceOf = _no_device, lane: Lane | None = None
    ) -> SignInOutcome:
        """The account's own password, asked again before it is changed; counted like a sign-in."""
        login = await self.credentials.login_of(account)
        if login is None:
            return SignInOutcome(None)
        attempt = await self.attempt(login, password, address, device_of, lane)
        return attempt if attempt.account == account else SignInOutcome(None, attempt.retry_after)

    async def key_attempt(
        self, address: str, check: Callable[[], Awaitable[T | None]], *, known: bool = False
    ) -> tuple[T | None, int]:
        """An API key given to sign in, counted against ``address`` like a password: (what ``check`` found, wait).

        A key not ``known`` (found valid lately) is checked with a place in the keys' room, or refused.
        """
        if known:
            return await self._key_attempt(address, check)
        if not self.keys_room.take(address):
            return None, BUSY_SECONDS
        try:
            return await self._key_attempt(address, check)
        finally:
            self.keys_room.give_back(address)

    async def _key_attempt(self, address: str, check: Callable[[], Awaitable[T | None]]) -> tuple[T | None, int]:
        reservation = await self.windows.reserve(None, address)
        if reservation.wait:
            return None, reservation.wait
        found = await check()
        if found is not None:
            await self.windows.succeeded(reservation)
        return found, 0


class _LaneSide:
    """The failure windows and credentials of the lane's own Redis client: built and used on its loop only."""

    def __init__(self, redis: Any, signin: PasswordSignIn) -> None:
        settings = signin.settings
        self.windows = FailureWindows(
            redis, signin.keys, settings.signin_failures_per_login, settings.signin_failures_per_address
        )
        self.credentials = Credentials(redis, signin.keys)


def _normalised(login: str) -> str:
    """The login's one spelling, so its case and width variants share one window."""
    try:
        return normalise_login(login)
    except LoginRejected:
        return login.strip().casefold()
