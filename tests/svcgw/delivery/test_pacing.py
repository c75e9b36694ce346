"""The rate limit's arithmetic (svcgw.delivery.pacing): one second's burst, then one interval apart; a backlog
lined up; nothing owed after a quiet spell. The claim's script applies it (tests/svcgw/delivery/test_claim.py)."""

from __future__ import annotations

import itertools

import pytest

from svcgw.delivery.pacing import BURST_SECONDS, Pace, expires_at, take
from svcgw.storage.keys import PLAIN, KeySpace


def _run(rate: float, arrivals: list[float]) -> tuple[list[float], list[float], Pace]:
    """Jobs arriving at those times, each taken once: when the ones that went went, and the dues of the others."""
    pace, went, dues = Pace(), [], []
    for now in arrivals:
        due, pace = take(pace, rate, now)
        if due is None:
            went.append(now)
        else:
            dues.append(due)
    return went, dues, pace


def test_a_burst_of_one_seconds_worth_goes_at_once_and_the_rest_is_lined_up_one_interval_apart() -> None:
    went, dues, pace = _run(20.0, [100.0] * 100)
    assert len(went) == 20 * BURST_SECONDS + 1
    assert len(dues) == 79 and dues[0] == pytest.approx(100.05)
    assert all(b - a == pytest.approx(0.05) for a, b in itertools.pairwise(dues))
    assert pace.horizon == dues[-1] and expires_at(pace) == pytest.approx(dues[-1] + 1)


def test_jobs_coming_back_when_due_go_and_no_second_holds_more_than_the_rate_and_its_burst() -> None:
    # 100 jobs at once; each handed back comes back when due, as the scheduled registry brings it.
    pace, started, waiting = Pace(), [], [100.0] * 100
    while waiting:
        waiting.sort()
        now = waiting.pop(0)
        due, pace = take(pace, 20.0, now)
        if due is None:
            started.append(now)
        else:
            assert due > now
            waiting.append(due)
    assert len(started) == 100
    busiest = max(sum(1 for t in started if s <= t < s + 1) for s in started)
    assert busiest <= 2 * 20 + 1
    assert started[-1] - started[0] == pytest.approx(79 * 0.05)


def test_a_fractional_rate_is_one_every_so_many_seconds() -> None:
    went, dues, _ = _run(0.5, [1000.0, 1000.0, 1000.0])
    assert went == [1000.0] and dues == pytest.approx([1001.0, 1003.0])
    went, _, _ = _run(0.5, [1000.0, 1001.0, 1003.0, 1005.0])
    assert went == [1000.0, 1001.0, 1003.0, 1005.0]


def test_a_destination_quiet_for_long_owes_nothing() -> None:
    _, _, pace = _run(1.0, [0.0] * 5)
    assert take(pace, 1.0, expires_at(pace) + 0.01)[0] is None
    assert take(Pace(), 1.0, 50.0) == (None, Pace(51.0, 0.0))


def test_the_pace_record_is_named_by_its_destination_on_each_shard() -> None:
    assert PLAIN.destination_pace("dst_0123456789abcdef") == "svcgw:pace:dst_0123456789abcdef"
    assert KeySpace("{s3}").destination_pace("dst_0123456789abcdef") == "{s3}svcgw:pace:dst_0123456789abcdef"
