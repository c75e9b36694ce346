"""Slots: a cap per host, deferrals that grow while a host frees no slot, and a work-conserving cap per account."""

from __future__ import annotations

import time

from svcgw.config.settings import Settings
from tests.conftest import provision
from tests.support import Sink, held_at_once, wait_for
from tests.worker.test_engine import Running, _post
from worker.concurrencycaps import (
    BORROW_SECONDS,
    CONTENDED_SECONDS,
    DEFER_SECONDS,
    LINE_QUICK,
    LINE_ROUNDS,
    AccountSlots,
    SocketSlots,
)


def test_slots_cap_a_host_and_free_on_release() -> None:
    clock = Clock()
    slots = SocketSlots(cap=2, timeout=10, clock=clock)
    first, second = slots.acquire("a:1"), slots.acquire("a:1")
    assert first is not None and second is not None
    assert slots.acquire("a:1") is None
    assert slots.acquire("b:1") is not None
    clock.now += LINE_QUICK + 0.01  # slower than a job would wait for in the worker: named to the claim
    assert set(slots.saturated()) == {"a:1"}
    slots.release("a:1", first)
    assert slots.saturated() == {}
    assert slots.acquire("a:1") is not None


def test_jobs_over_a_quick_hosts_cap_wait_in_the_worker_in_a_line_of_bounded_length() -> None:
    clock = Clock()
    slots = SocketSlots(cap=2, timeout=10, clock=clock)
    slots.acquire("a:1"), slots.acquire("a:1")
    # Its attempts are young: a job over its cap may wait for a slot, and the claim need not hold its jobs back.
    assert slots.may_wait("a:1") and slots.saturated() == {}
    for _ in range(LINE_ROUNDS * 2):
        slots.waits("a:1", True)
    assert not slots.may_wait("a:1") and set(slots.saturated()) == {"a:1"}  # the line is full
    slots.waits("a:1", False)
    assert slots.may_wait("a:1")
    clock.now += LINE_QUICK + 0.01  # its oldest attempt is no longer quick
    assert not slots.may_wait("a:1")


def test_the_wait_doubles_while_a_host_frees_no_slot() -> None:
    clock = Clock()
    slots = SocketSlots(cap=1, timeout=5, clock=clock)
    token = slots.acquire("hang:1")
    assert token is not None
    waits = []
    for _ in range(8):
        waits.append(slots.defer_delay("hang:1"))
        clock.now += waits[-1] / 0.8  # the deferred job is back, and finds the host still full
    assert DEFER_SECONDS * 0.8 <= waits[0] <= DEFER_SECONDS * 1.2
    assert waits[2] > waits[0] * 2
    assert all(w <= 5 * 1.2 for w in waits) and waits[-1] >= 5 * 0.8


def test_each_claim_that_finds_a_host_saturated_doubles_its_wait() -> None:
    # The claim script hands back every job of a saturated host it pops: a host that frees no
    # slot reaches the delivery timeout within a few claims, not a few seconds.
    clock = Clock()
    slots = SocketSlots(cap=1, timeout=5, clock=clock)
    assert slots.acquire("hang:1") is not None
    clock.now += LINE_QUICK + 0.01
    waits = [slots.saturated()["hang:1"] - time.time() for _ in range(8)]
    assert waits[2] > waits[0] * 2 and waits[-1] >= 5 * 0.8 - 0.1


def test_a_freed_slot_starts_the_waits_short_again() -> None:
    clock = Clock()
    slots = SocketSlots(cap=1, timeout=5, clock=clock)
    token = slots.acquire("a:1")
    assert token is not None
    slots.defer_delay("a:1")
    clock.now += 0.3
    assert slots.defer_delay("a:1") >= 0.5 * 0.8  # a second round, twice as long
    clock.now += 0.01
    slots.release("a:1", token)
    slots.acquire("a:1")
    clock.now += 0.6
    # Not 1 s (a third round): the slot that freed reset the doubling; the oldest attempt's age decides.
    assert slots.defer_delay("a:1") <= 0.6 * 1.2


def test_a_burst_over_the_cap_lines_up_at_the_hosts_pace_rather_than_doubling() -> None:
    # A socket's retries falling due together: the jobs past its cap come back one per
    # slot it frees, not all after the delivery timeout.
    clock = Clock()
    slots = SocketSlots(cap=16, timeout=5, clock=clock)
    tokens = [slots.acquire("fast:1") for _ in range(16)]
    clock.now += 0.08
    for token in tokens[1:]:
        assert token is not None
        slots.release("fast:1", token)  # it answers in 80 ms: a slot every 5 ms
    for _ in range(15):
        slots.acquire("fast:1")
    waits = [slots.defer_delay("fast:1") for _ in range(84)]
    assert all(DEFER_SECONDS * 0.8 <= w <= DEFER_SECONDS * 1.2 + 84 * 0.005 for w in waits)
    assert max(waits) < 1  # before: the later ones waited the delivery timeout
    assert min(waits[-10:]) > max(waits[:10])  # later in line, later back


def test_a_long_line_is_spread_over_the_timeout() -> None:
    clock = Clock()
    slots = SocketSlots(cap=2, timeout=5, clock=clock)
    token, _ = slots.acquire("slow:1"), slots.acquire("slow:1")
    assert token is not None
    clock.now += 4
    slots.release("slow:1", token)  # it answers in 4 s: one slot in 2 s, 1,000 jobs in 2,000 s
    slots.acquire("slow:1")
    waits = [slots.defer_delay("slow:1") for _ in range(1000)]
    assert max(waits) <= 4 * 1.2 + 5  # not 1,000 answer times away
    assert len({round(w, 1) for w in waits[10:]}) > 20  # spread, not one instant


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_account_alone_with_quick_attempts_may_use_more_than_its_cap() -> None:
    clock = Clock()
    accounts = AccountSlots(cap=2, timeout=10, clock=clock)
    first, second = accounts.acquire("a"), accounts.acquire("a")
    assert first is not None and second is not None
    # How long its attempts take is not known yet: it waits like any account at its cap.
    assert accounts.acquire("a") is None and set(accounts.saturated()) == {"a"}
    clock.now += 0.2
    accounts.release("a", first)
    assert accounts.acquire("a") is not None
    assert accounts.acquire("a") is not None  # over the cap: 3 in flight of a cap of 2
    assert accounts.saturated() == {}


def test_the_cap_bites_again_once_another_account_wants_slots() -> None:
    clock = Clock()
    accounts = AccountSlots(cap=1, timeout=10, clock=clock)
    token = accounts.acquire("a")
    assert token is not None
    clock.now += 0.1
    accounts.release("a", token)
    # With nothing in flight, it is still known to be quick.
    first, second = accounts.acquire("a"), accounts.acquire("a")
    assert first is not None and second is not None
    clock.now += CONTENDED_SECONDS * 3
    accounts.acquire("b")  # a while later: a is forgotten, its next attempts start under the cap again
    accounts.release("a", first)
    accounts.release("a", second)
    assert accounts.acquire("a") is not None and accounts.acquire("a") is None
    # Attempts quick enough to borrow even after the wait below.
    accounts = AccountSlots(cap=2, timeout=10, clock=clock, borrow=CONTENDED_SECONDS + 1)
    token, _ = accounts.acquire("a"), accounts.acquire("a")
    assert token is not None
    clock.now += 0.1
    accounts.release("a", token)
    assert accounts.acquire("a") is not None and accounts.acquire("a") is not None
    other = accounts.acquire("b")
    assert other is not None
    assert accounts.acquire("a") is None and "a" in accounts.saturated()
    clock.now += 0.1
    accounts.release("b", other)
    # b has nothing in flight, but a job of it was taken up a moment ago: it may have more waiting.
    assert accounts.acquire("a") is None
    clock.now += CONTENDED_SECONDS + 0.1
    assert accounts.acquire("a") is not None


def test_a_slot_given_back_without_an_attempt_says_nothing_of_the_answer_time() -> None:
    clock = Clock()
    accounts = AccountSlots(cap=2, timeout=10, clock=clock)
    first, second = accounts.acquire("a"), accounts.acquire("a")
    assert first is not None and second is not None
    accounts.give_back("a", first)  # its socket was at its cap: no attempt
    assert accounts.acquire("a") is not None and accounts.acquire("a") is None  # still not known to be quick
    clock.now += 0.1
    accounts.release("a", second)
    assert accounts.acquire("a") is not None and accounts.acquire("a") is not None


def test_an_account_whose_attempts_hang_does_not_borrow() -> None:
    clock = Clock()
    accounts = AccountSlots(cap=2, timeout=10, clock=clock)
    token, _ = accounts.acquire("a"), accounts.acquire("a")
    assert token is not None
    clock.now += BORROW_SECONDS + 0.5
    accounts.release("a", token)  # its usual answer time is now longer than a borrowed slot may be held
    assert accounts.acquire("a") is not None and accounts.acquire("a") is None
    slow = AccountSlots(cap=2, timeout=10, clock=clock)
    quick, _ = slow.acquire("a"), slow.acquire("a")
    assert quick is not None
    clock.now += 0.1
    slow.release("a", quick)
    assert slow.acquire("a") is not None
    clock.now += BORROW_SECONDS  # the attempts in flight have been waiting too long
    assert slow.acquire("a") is None and "a" in slow.saturated()


# --- the engine in this process, against real loopback sinks ----------------------------
def _four_slots_two_an_account(env: dict[str, str]) -> Settings:
    return Settings.from_env(
        dict(env, SVCGW_DELIVERY_CONCURRENCY="4", SVCGW_ACCOUNT_CONCURRENCY="2", SVCGW_DELIVERY_TIMEOUT="4")
    )


def test_one_account_alone_uses_every_slot_of_the_worker(env: dict[str, str], sink: Sink) -> None:
    settings = _four_slots_two_an_account(env)
    sink.set(delay=0.4)
    tenant = provision(settings, url=sink.url)
    for n in range(16):
        _post(settings, tenant, f"a{n}")
    with Running(settings):
        wait_for(lambda: len(sink.posts()) >= 16, timeout=20, what="every delivery")
    assert held_at_once(sink.posts()) == 4


def test_the_first_account_goes_back_to_its_cap_while_a_second_one_delivers(
    env: dict[str, str], sink: Sink
) -> None:
    settings = _four_slots_two_an_account(env)
    sink.set(delay=0.3)
    first = provision(settings, url=sink.url)
    for n in range(12):
        _post(settings, first, f"a{n}")
    other = Sink(delay=0.3).start()
    try:
        second = provision(settings, url=other.url)
        with Running(settings):
            wait_for(lambda: held_at_once(sink.posts()) > 2, timeout=10, what="the first account to borrow")
            for n in range(16):
                _post(settings, first, f"b{n}")
                _post(settings, second, f"c{n}")
            wait_for(lambda: len(other.posts()) >= 16, timeout=20, what="the second account's deliveries")
        begun, ended = other.posts()[0].at + 0.3, other.posts()[-1].at  # once the borrowed slots came back
        meanwhile = [post for post in sink.posts() if begun <= post.at < ended]
        assert meanwhile, "the first account had nothing in flight while the second delivered"
        assert held_at_once(meanwhile) <= 2
        assert held_at_once(other.posts()) == 2
    finally:
        other.stop()
