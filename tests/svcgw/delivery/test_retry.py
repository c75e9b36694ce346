from __future__ import annotations

import pytest

from svcgw.config.settings import DEFAULT_RETRY_SCHEDULE
from svcgw.delivery.retry import next_delay


def test_default_schedule_is_the_specs() -> None:
    delays = [next_delay(DEFAULT_RETRY_SCHEDULE, n) for n in range(1, 8)]
    assert delays == [30, 120, 600, 1800, 7200, 21600, None]


def test_failures_count_from_one() -> None:
    with pytest.raises(ValueError):
        next_delay((1.0,), 0)


def test_empty_schedule_means_no_retry() -> None:
    assert next_delay((), 1) is None
