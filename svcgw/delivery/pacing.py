"""The rate limit of a further destination: at most ``rate`` deliveries a second, across every worker.

A generic cell rate algorithm (GCRA) over one small record per destination in Redis,
``KeySpace.destination_pace`` (``t``: the theoretical arrival time of its next delivery; ``h``: the
horizon, the last due time given to a job handed back). The claim's read (``queue_read.lua``) is
the authority: it applies exactly this arithmetic, atomically, as it starts each job. This module
is the same arithmetic in Python, pure, for tests and for reasoning about it.

* The interval between deliveries is ``1 / rate`` seconds; a burst of up to one second's worth
  may go at once (:data:`BURST_SECONDS`): in any window of ``w`` seconds at most
  ``rate * (w + 1) + 1`` deliveries start.
* A job over the rate is not attempted: it goes back to the scheduled registry, due when its turn
  comes. The horizon lines a backlog up one interval apart, so that the jobs handed back by one
  claim come back at the rate rather than all at once (and most of them handed back again).
* The record expires a second after both its times have passed: a destination that has been
  quiet that long owes nothing, which is what a missing record says.

The clock is the claiming worker's, as the scheduled registry's due times are: workers whose
clocks differ by ``d`` seconds may let ``rate * d`` more through at once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BURST_SECONDS", "Pace", "expires_at", "take"]

BURST_SECONDS = 1.0


@dataclass(frozen=True)
class Pace:
    """A destination's pace record: ``tat`` the theoretical arrival time of its next delivery, ``horizon`` the last
    due time handed out (Unix seconds; 0 for none)."""

    tat: float = 0.0
    horizon: float = 0.0


def take(pace: Pace, rate: float, now: float) -> tuple[float | None, Pace]:
    """One job at ``now`` for a destination of ``rate`` deliveries a second: (None, the record after it went),
    or (when its turn comes, the record with it handed back)."""
    interval = 1.0 / rate
    tat = max(pace.tat, now)
    if tat - now <= BURST_SECONDS:
        return None, Pace(tat + interval, pace.horizon)
    due = max(tat - BURST_SECONDS, pace.horizon + interval)
    return due, Pace(pace.tat, due)


def expires_at(pace: Pace) -> float:
    """When the record may go: a second after both its times."""
    return max(pace.tat, pace.horizon) + 1.0
