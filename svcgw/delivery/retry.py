"""Retry policy: when the next attempt of a delivery is due.

The schedule is configuration (``SVCGW_RETRY_SCHEDULE``): the delay before
retry 1, 2, ... in seconds. An attempt numbered past the schedule's end has
no successor and the delivery becomes a dead letter.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["next_delay"]


def next_delay(schedule: Sequence[float], failed_attempts: int) -> float | None:
    """Seconds to wait after ``failed_attempts`` failures, or None when retries are exhausted.

    >>> next_delay([30, 120], 1)
    30
    >>> next_delay([30, 120], 3) is None
    True
    """
    if failed_attempts < 1:
        raise ValueError("failed_attempts counts failures and starts at 1")
    if failed_attempts > len(schedule):
        return None
    return schedule[failed_attempts - 1]
