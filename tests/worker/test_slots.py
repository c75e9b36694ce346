"""Destination slots: a cap per host, and deferrals that grow while a host frees no slot."""

from __future__ import annotations

from worker.slots import DEFER_SECONDS, DestinationSlots


def test_slots_cap_a_host_and_free_on_release() -> None:
    slots = DestinationSlots(cap=2, timeout=10)
    first, second = slots.acquire("a:1"), slots.acquire("a:1")
    assert first is not None and second is not None
    assert slots.acquire("a:1") is None
    assert slots.acquire("b:1") is not None
    assert set(slots.saturated()) == {"a:1"}
    slots.release("a:1", first)
    assert slots.saturated() == {}
    assert slots.acquire("a:1") is not None


def test_the_wait_doubles_while_a_host_frees_no_slot() -> None:
    slots = DestinationSlots(cap=1, timeout=5)
    token = slots.acquire("hang:1")
    assert token is not None
    waits = [slots.defer_delay("hang:1") for _ in range(8)]
    assert DEFER_SECONDS * 0.8 <= waits[0] <= DEFER_SECONDS * 1.2
    assert waits[2] > waits[0] * 2
    assert all(w <= 5 * 1.2 for w in waits) and waits[-1] >= 5 * 0.8
    slots.release("hang:1", token)
    slots.acquire("hang:1")
    assert slots.defer_delay("hang:1") <= 1.2  # answered quickly this time: short waits again
