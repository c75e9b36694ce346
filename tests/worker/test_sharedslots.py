"""The slots a Cluster's worker shares between the engines of its virtual shards (worker.sharedslots)."""

from __future__ import annotations

import asyncio

from worker.sharedslots import SharedSlots


def test_reserved_and_running_slots_are_taken_from_every_engine() -> None:
    slots = SharedSlots(10, 2)
    a, b = object(), object()
    assert slots.room(a, asyncio.Event(), 10) == 10
    slots.reserve(a, 6)
    # While a's claim is under way, b sees only what is left, not its own ten.
    assert slots.room(b, asyncio.Event(), 10) == 4
    slots.settle(a, 3)  # three started, three given back
    assert slots.free == 7
    assert slots.room(b, asyncio.Event(), 10) == 7
    assert slots.room(b, asyncio.Event(), 5) == 5  # never more than its own free slots
    slots.ended()
    assert slots.free == 8


def test_a_failed_claims_reservation_is_replaced_by_the_next() -> None:
    slots = SharedSlots(10, 2)
    a = object()
    slots.reserve(a, 8)  # the claim raised: never settled
    slots.reserve(a, 3)
    assert slots.free == 7
    slots.leave(a)
    assert slots.free == 10


def test_an_engine_short_of_room_waits_in_line_and_is_woken_when_room_comes_back() -> None:
    slots = SharedSlots(4, 2)
    a, b, c = object(), object(), object()
    wake_b, wake_c = asyncio.Event(), asyncio.Event()
    slots.reserve(a, 4)
    slots.settle(a, 4)
    assert slots.room(b, wake_b, 4) == 0
    assert slots.waiting() == 1
    slots.ended()  # one free: under the low mark, nobody woken
    assert not wake_b.is_set()
    # c, outside the line while b waits in it, may not claim even what is free: it joins behind b.
    assert slots.room(c, wake_c, 4) == 0
    slots.ended()
    assert wake_b.is_set() and wake_c.is_set()  # both may look again, b first in line
    assert slots.room(b, wake_b, 4) == 2
    slots.reserve(b, 2)
    assert slots.waiting() == 1  # c keeps its place
    assert slots.room(a, asyncio.Event(), 4) == 0  # a, outside the line, goes behind c


def test_a_ramping_pool_holds_the_low_mark_until_an_attempt_has_ended() -> None:
    slots = SharedSlots(100, 10, ramp=True)
    a = object()
    assert slots.room(a, asyncio.Event(), 100) == 10
    slots.reserve(a, 10)
    slots.settle(a, 10)
    assert slots.free == 0
    slots.ended()
    assert slots.free == 91  # warm: every slot, less the nine still running


def test_a_private_pool_gives_one_engine_its_own_slots() -> None:
    slots = SharedSlots(1024, 100)
    engine = object()
    assert slots.room(engine, asyncio.Event(), 1024) == 1024
    slots.reserve(engine, 100)
    slots.settle(engine, 100)
    assert slots.room(engine, asyncio.Event(), 924) == 924


def test_with_room_enough_any_engine_claims_and_the_line_is_woken() -> None:
    slots = SharedSlots(10, 4)
    a, b = object(), object()
    wake_a = asyncio.Event()
    slots.reserve(b, 10)
    assert slots.room(a, wake_a, 10) == 0  # a waits in line
    slots.settle(b, 5)  # five free again: a woken
    assert wake_a.is_set()
    wake_a.clear()
    # b, outside the line, may claim while there is a batch's room: nobody in the line sleeps meanwhile.
    assert slots.room(b, asyncio.Event(), 10) == 5
    assert wake_a.is_set()
