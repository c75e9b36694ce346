"""The server near its cap: which connections go first, how many, and how long keep-alive lasts."""

from __future__ import annotations

import logging

import pytest

from receiver.server.pressure import IDLE, IDLE_GRACE, UNFINISHED, Pressure, keepalive_timeout, pick, shed_rank


def test_idle_connections_go_first_the_longest_idle_first() -> None:
    now = 100.0
    ranked = [
        (shed_rank(now, None, 99.0, 10), "a slow body"),
        (shed_rank(now, 98.0, 0.0, 0), "idle for 2 s"),
        (shed_rank(now, 90.0, 0.0, 0), "idle for 10 s"),
        (shed_rank(now, None, 99.9, 100_000), "a fast upload"),
    ]
    assert pick(ranked, 2) == ["idle for 10 s", "idle for 2 s"]
    assert pick(ranked, 3)[-1] == "a slow body"
    assert pick(ranked, 10) == ["idle for 10 s", "idle for 2 s", "a slow body", "a fast upload"]
    assert shed_rank(now, 90.0, 0.0, 0)[0] == IDLE and shed_rank(now, None, 90.0, 0)[0] == UNFINISHED


def test_a_connection_idle_for_a_moment_goes_last_a_client_between_two_requests() -> None:
    now = 100.0
    ranked = [
        (shed_rank(now, now - IDLE_GRACE / 10, 0.0, 0), "answered a moment ago"),
        (shed_rank(now, None, 90.0, 5_000), "a slow body"),
        (shed_rank(now, now - IDLE_GRACE, 0.0, 0), "idle for the grace"),
    ]
    assert pick(ranked, 3) == ["idle for the grace", "a slow body", "answered a moment ago"]


def test_unfinished_requests_go_slowest_first_then_oldest() -> None:
    now = 100.0
    ranked = [
        (shed_rank(now, None, 90.0, 5_000), "500 B/s for 10 s"),
        (shed_rank(now, None, 80.0, 10_000), "500 B/s for 20 s"),
        (shed_rank(now, None, 99.0, 100), "100 B/s"),
        (shed_rank(now, None, 100.0, 200), "a head that just arrived"),
    ]
    assert pick(ranked, 4) == ["100 B/s", "500 B/s for 20 s", "500 B/s for 10 s", "a head that just arrived"]


def test_room_is_made_past_the_high_water_down_to_the_low_water() -> None:
    pressure = Pressure(256, 5.0)
    assert (pressure.high_water(), pressure.low_water()) == (240, 224)
    assert pressure.excess(240) == 0
    assert pressure.excess(241) == 241 - 224
    # Connections already shed but not yet closed by the event loop are not shed again.
    pressure.going = 17
    assert pressure.excess(241) == 0 and pressure.excess(258) == 258 - 17 - 224
    # A small cap is left alone: a sixteenth of it would be one client closed for the next.
    small = Pressure(16, 5.0)
    assert small.excess(16) == 0 and small.excess(100) == 0


def test_keep_alive_shrinks_as_the_cap_fills() -> None:
    assert keepalive_timeout(5.0, 0, 2048) == 5.0
    assert keepalive_timeout(5.0, 1024, 2048) == 5.0
    assert keepalive_timeout(5.0, 1536, 2048) == pytest.approx(2.5)
    assert keepalive_timeout(5.0, 1920, 2048) == pytest.approx(0.625)
    assert keepalive_timeout(5.0, 2048, 2048) == pytest.approx(0.5)  # never under a tenth
    timeouts = [keepalive_timeout(5.0, n, 2048) for n in range(0, 2049, 64)]
    assert timeouts == sorted(timeouts, reverse=True)
    pressure = Pressure(2048, 5.0)
    pressure.going = 512
    assert pressure.keepalive_now(1536 + 512) == pytest.approx(2.5)


def test_shedding_is_told_in_the_log_now_and_then_with_counts(caplog: pytest.LogCaptureFixture) -> None:
    pressure = Pressure(256, 5.0)
    with caplog.at_level(logging.WARNING, logger="svcgw"):
        pressure.note(IDLE, 241)
        for _ in range(5):
            pressure.note(UNFINISHED, 241)
    lines = [r.getMessage() for r in caplog.records if r.name == "svcgw"]
    assert lines == [
        "241 of 256 connections open: 1 idle connections and 0 unfinished requests closed to make room"
        " (since the last such line)"
    ]
    assert pressure.shed == [1, 5]
