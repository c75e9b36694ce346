"""receiver.console.signin on its own, against a real Redis: argon2 off the event loop, attempts counted
before they are checked, and room for checks bounded per client address."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from receiver.console.failures import FailureWindows
from receiver.console.signin import (
    BUSY_SECONDS,
    HASHING_AT_ONCE,
    KEYS_AT_ONCE,
    LANE_HASHING,
    PER_ADDRESS,
    WAITING_AT_ONCE,
    Hashing,
    Lane,
    PasswordSignIn,
    SignInOutcome,
)
from receiver.services import build_services
from svcgw.config.settings import Settings
from svcgw.registry import passwords
from svcgw.storage.keys import PLAIN as keys
from tests.receiver.console.members import PASSWORD, make_member

T = TypeVar("T")


def with_signin(settings: Settings, work: Callable[[PasswordSignIn], Awaitable[T]]) -> T:
    async def main() -> T:
        services = build_services(settings)
        try:
            return await work(PasswordSignIn(services))
        finally:
            for close in services.closing:
                await close()
            await services.redis.aclose()
            await services.text_redis.aclose()

    return asyncio.run(main())


class Checks:
    """Counts the argon2 runs of ``svcgw.registry.passwords``: on which threads, and how many at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: set[int] = set()
        self.count = 0
        self.running = 0
        self.most = 0
        self._guard = threading.Lock()
        for name in ("verify", "verify_nothing", "hash_password"):
            monkeypatch.setattr(passwords, name, self._counted(getattr(passwords, name)))

    def _counted(self, work: Callable[..., T]) -> Callable[..., T]:
        def counted(*args: Any) -> T:
            with self._guard:
                self.threads.add(threading.get_ident())
                self.count += 1
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                return work(*args)
            finally:
                with self._guard:
                    self.running -= 1

        return counted


def test_a_storm_of_sign_ins_runs_argon2_off_the_event_loop_a_few_at_a_time(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    member = make_member(settings)
    checks = Checks(monkeypatch)

    async def storm(signin: PasswordSignIn) -> tuple[list[str | None], int]:
        loop_thread = threading.get_ident()
        attempts = [signin.attempt(member.login, PASSWORD, f"192.0.2.{n}") for n in range(3)]
        attempts += [signin.attempt(f"nobody{n}@example.com", "wrong password!", f"192.0.2.{10 + n}") for n in range(5)]
        outcomes = await asyncio.gather(*attempts)
        return [outcome.account for outcome in outcomes], loop_thread

    accounts, loop_thread = with_signin(settings, storm)
    assert accounts == [member.account] * 3 + [None] * 5
    # The work done, not the time it took: every check ran, none on the event loop's thread, two at most at once.
    assert checks.count == 8 and loop_thread not in checks.threads
    assert checks.most <= HASHING_AT_ONCE


def test_a_burst_against_one_login_gets_no_more_checks_than_its_limit(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings.from_env({**env, "SVCGW_SIGNIN_FAILURES_PER_LOGIN": "10/15minutes"})
    member = make_member(settings)
    checks = Checks(monkeypatch)

    async def burst(signin: PasswordSignIn) -> tuple[list[SignInOutcome], SignInOutcome]:
        # 40 at once, each from an address of its own: only the login's window holds them back.
        wrong = [signin.attempt(member.login.upper(), "wrong password!", f"198.51.100.{n}") for n in range(40)]
        outcomes = await asyncio.gather(*wrong)
        return outcomes, await signin.attempt(member.login, PASSWORD, "198.51.100.200")

    outcomes, right = with_signin(settings, burst)
    refused = [o for o in outcomes if o.retry_after]
    assert sum(1 for o in outcomes if not o.retry_after and o.account is None) == 10
    assert len(refused) == 30 and checks.count == 10
    # The right password after the burst is refused too, without a check.
    assert right == SignInOutcome(None, right.retry_after) and right.retry_after >= 1 and checks.count == 10


def test_reserving_is_atomic_under_concurrency(settings: Settings) -> None:
    async def burst(signin: PasswordSignIn) -> list[int]:
        windows = FailureWindows(signin.credentials.redis, keys, "10/15minutes", "50/15minutes")
        # As many at once as the client's pool of connections allows (100).
        reservations = await asyncio.gather(*(windows.reserve(None, "203.0.113.9") for _ in range(80)))
        taken = [r for r in reservations if not r.wait]
        # A success gives its place back to the address: one more fits, and no more.
        await windows.succeeded(taken[0])
        again = [await windows.reserve(None, "203.0.113.9") for _ in range(2)]
        return [len(taken), *(r.wait for r in again)]

    taken, first, second = with_signin(settings, burst)
    assert taken == 50
    assert first == 0 and 1 <= second <= 900


def test_a_flood_from_one_address_leaves_room_for_another(settings: Settings) -> None:
    member = make_member(settings)

    async def flood(signin: PasswordSignIn) -> tuple[list[SignInOutcome], SignInOutcome, float, float]:
        flood = [
            asyncio.ensure_future(signin.attempt(f"flood{n}@example.com", "wrong password!", "192.0.2.66"))
            for n in range(400)
        ]
        await asyncio.sleep(0)  # the flood is in before the one who signs in
        mine = time.monotonic()
        signed_in = await signin.attempt(member.login, PASSWORD, "192.0.2.7")
        took = time.monotonic() - mine
        outcomes = await asyncio.gather(*flood)
        # The same sign-in alone, now: what the machine's own load costs it.
        alone = time.monotonic()
        assert (await signin.attempt(member.login, PASSWORD, "192.0.2.7")).account == member.account
        return outcomes, signed_in, took, time.monotonic() - alone

    outcomes, signed_in, took, alone = with_signin(settings, flood)
    assert signed_in.account == member.account
    # Under 2 s (a machine busy with other work may stretch that, never to the 200 checks of the queue).
    assert took < max(2.0, 3 * alone), (took, alone)
    # What found no room was refused with a wait, not queued: the flood got its share of places, no more.
    busy = [o for o in outcomes if o.retry_after == BUSY_SECONDS and o.account is None]
    assert len(busy) >= 400 - PER_ADDRESS


def test_api_keys_given_to_sign_in_have_a_bounded_room_which_a_key_found_valid_lately_does_not_need(
    settings: Settings,
) -> None:
    async def burst(signin: PasswordSignIn) -> tuple[list[tuple[str | None, int]], list[tuple[str | None, int]], int]:
        running = most = 0

        async def check(found: str | None) -> str | None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.05)
            running -= 1
            return found

        # Wrong keys from one address and from many, at once, and a key known valid from the first address.
        wrong = [signin.key_attempt("192.0.2.1", lambda: check(None)) for _ in range(20)]
        wrong += [signin.key_attempt(f"198.51.100.{n}", lambda: check(None)) for n in range(2 * KEYS_AT_ONCE)]
        known = [signin.key_attempt("192.0.2.1", lambda: check("account"), known=True) for _ in range(3)]
        outcomes = await asyncio.gather(*wrong, *known)
        return outcomes[: len(wrong)], outcomes[len(wrong) :], most

    wrong, known, most = with_signin(settings, burst)
    assert known == [("account", 0)] * 3
    busy = [outcome for outcome in wrong if outcome == (None, BUSY_SECONDS)]
    assert len(busy) >= len(wrong) - KEYS_AT_ONCE and len(busy) >= 20 - PER_ADDRESS
    assert most <= KEYS_AT_ONCE + 3  # the room's, and the known keys'


def test_a_browser_with_a_device_cookie_of_its_login_has_a_lane_that_a_flood_from_many_addresses_cannot_fill(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    member, other = make_member(settings), make_member(settings)
    real = passwords.verify_nothing

    def slow_nothing() -> None:
        time.sleep(0.5)
        real()

    # The flood's checks take their time: the room everyone shares stays full while the browser signs in.
    monkeypatch.setattr(passwords, "verify_nothing", slow_nothing)

    def device_of(account: str, password_version: str) -> str | None:
        return "this browser" if account == member.account else None

    async def flood(signin: PasswordSignIn) -> tuple[int, SignInOutcome, SignInOutcome, SignInOutcome]:
        found = await signin.credentials.lookup(member.login)
        assert found is not None
        lane = Lane(member.account, "this browser", found.password_version)
        strangers = [
            asyncio.ensure_future(signin.attempt(f"stranger{n}@example.com", "wrong password!", f"203.0.113.{n}"))
            for n in range(100)
        ]
        await asyncio.sleep(0.05)
        held = signin.room.held
        try:
            mine = await signin.attempt(member.login, PASSWORD, "192.0.2.7", device_of, lane=lane)
            # The cookie opens its own account's lane only: another login from that browser meets the room...
            theirs = await signin.attempt(other.login, PASSWORD, "192.0.2.7", device_of, lane=lane)
            # ...and so does a cookie of another password version than the login's (one a new password retired).
            retired = lane._replace(password_version=found.password_version + "0")
            unproved = await signin.attempt(member.login, PASSWORD, "192.0.2.8", device_of, lane=retired)
        finally:
            for stranger in strangers:
                stranger.cancel()
            await asyncio.gather(*strangers, return_exceptions=True)
        return held, mine, theirs, unproved

    held, mine, theirs, unproved = with_signin(settings, flood)
    assert held == WAITING_AT_ONCE
    assert mine.account == member.account
    assert theirs == unproved == SignInOutcome(None, BUSY_SECONDS)


def test_a_check_of_the_lane_goes_first_and_the_room_keeps_one_run() -> None:
    async def main() -> list[str]:
        hashing = Hashing(HASHING_AT_ONCE, LANE_HASHING)
        started: list[str] = []
        done = {name: asyncio.Event() for name in ("room0", "room1", "room2", "room3", "lane0", "lane1")}

        async def run(name: str) -> None:
            async with hashing.for_lane() if name.startswith("lane") else hashing.for_room():
                started.append(name)
                await done[name].wait()

        async def settle() -> None:
            for _ in range(5):
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(run(f"room{n}")) for n in range(4)]
        await settle()
        assert started == ["room0", "room1"]  # the room's two, its other two waiting in turn
        tasks.append(asyncio.create_task(run("lane0")))
        await settle()
        assert started[-1] == "lane0"  # at once, past the room's queue
        done["room0"].set()
        await settle()
        # The room's next waits for the lane's run: two in all, as with no lane.
        assert started == ["room0", "room1", "lane0"] and hashing.room_running == 1
        done["room1"].set()
        await settle()
        # ...but the room never stops: one run of its own whatever the lane has waiting. (The lane's own runs
        # are bounded by its executor, LaneLoop.in_thread: here each check of the lane is only counted.)
        tasks.append(asyncio.create_task(run("lane1")))
        await settle()
        assert started == ["room0", "room1", "lane0", "room2", "lane1"]
        done["lane0"].set()
        await settle()
        assert hashing.lane_wanting == 1 and hashing.room_running == 1  # lane1 still wants: room3 waits
        done["lane1"].set()
        await settle()
        assert started[-1] == "room3"  # the lane is empty: the room has its two again
        for name in ("room2", "room3"):
            done[name].set()
        await asyncio.gather(*tasks)
        assert hashing.room_running == 0 and hashing.lane_wanting == 0
        return started

    assert asyncio.run(main()) == ["room0", "room1", "lane0", "room2", "lane1", "room3"]


def test_a_waiter_of_the_room_cancelled_leaves_its_turn_to_the_next() -> None:
    async def main() -> int:
        hashing = Hashing(HASHING_AT_ONCE, LANE_HASHING)
        release = asyncio.Event()
        entered: list[int] = []

        async def run(number: int) -> None:
            async with hashing.for_room():
                entered.append(number)
                await release.wait()

        tasks = [asyncio.create_task(run(n)) for n in range(4)]
        for _ in range(5):
            await asyncio.sleep(0)
        tasks[2].cancel()
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert entered == [0, 1, 3]
        return hashing.room_running

    assert asyncio.run(main()) == 0


def test_while_the_lanes_check_runs_the_room_starts_none_past_the_cores(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    member = make_member(settings)
    changed = threading.Condition()
    running = {"room": 0, "lane": 0}
    ended = {"room": 0}
    # At each start of a run: which, and how many ran then (itself included), the room's and the lane's.
    starts: list[tuple[str, int, int]] = []
    real_verify, real_nothing = passwords.verify, passwords.verify_nothing

    def counted(kind: str, work: Callable[[], T]) -> T:
        with changed:
            running[kind] += 1
            starts.append((kind, running["room"], running["lane"]))
            changed.notify_all()
        try:
            return work()
        finally:
            with changed:
                running[kind] -= 1
                ended[kind] = ended.get(kind, 0) + 1
                changed.notify_all()

    def room() -> None:  # the flood's logins are nobody's: verify_nothing, in the room
        counted("room", real_nothing)

    def lane(stored: str, password: str) -> bool:  # the browser's own login: verify, in the lane
        def work() -> bool:
            # Held until the room's runs under way when it came have ended and the room has started
            # what it starts meanwhile (one at least: the room never stops), and a moment more for more.
            with changed:
                under_way = ended["room"] + running["room"]
                assert changed.wait_for(lambda: ended["room"] >= under_way, timeout=60)
                assert changed.wait_for(lambda: running["room"], timeout=60)
            time.sleep(0.3)
            return real_verify(stored, password)

        return counted("lane", work)

    monkeypatch.setattr(passwords, "verify_nothing", room)
    monkeypatch.setattr(passwords, "verify", lane)

    def device_of(account: str, password_version: str) -> str | None:
        return "this browser" if account == member.account else None

    async def flood(signin: PasswordSignIn) -> tuple[int, SignInOutcome]:
        found = await signin.credentials.lookup(member.login)
        assert found is not None
        lane = Lane(member.account, "this browser", found.password_version)
        strangers = [
            asyncio.ensure_future(signin.attempt(f"stranger{n}@example.com", "wrong password!", f"203.0.113.{n}"))
            for n in range(8)
        ]
        await asyncio.sleep(0.05)
        try:
            before = len(starts)
            return before, await signin.attempt(member.login, PASSWORD, "192.0.2.7", device_of, lane=lane)
        finally:
            await asyncio.gather(*strangers)

    before, mine = with_signin(settings, flood)
    assert mine.account == member.account
    [first] = [n for n, (kind, _, _) in enumerate(starts) if kind == "lane"]
    # Not queued behind the room's waiters: at most the places that freed meanwhile went first.
    assert first - before <= HASHING_AT_ONCE, (before, starts)
    # The room's runs started while the lane's ran: never past HASHING_AT_ONCE in all.
    during = [(rooms, lanes) for kind, rooms, lanes in starts[first + 1 :] if kind == "room" and lanes]
    assert during and all(rooms + lanes <= HASHING_AT_ONCE for rooms, lanes in during), starts
