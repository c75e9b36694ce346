"""How often an engine repeats its polling: every turn's cadence, and an idle engine's on a Redis Cluster.

A worker runs one engine per shard (:mod:`worker.main`), on a Cluster one per
virtual shard (16 by default). Each engine's loop promotes due retries, reads
the probing records and waits on its queue at a cadence chosen for one engine
on one Redis: sixteen of them, idle, repeat the same polling sixteen times
over, most of an idle worker's commands and CPU. So on a Cluster an engine
that is idle (nothing held, nothing claimed or popped, no outcome waiting,
no retry in its scheduled registry) paces that polling out. It misses nothing
by it:

* a job pushed to its queue ends its blocking wait at once (``BLMOVE``);
* a retry it or another worker schedules has a due time it learns at its next
  promotion: while it holds a claim its cadence is the busy one, and a retry
  another worker schedules is that worker's to promote as well, on time;
* the first turn after an idle stretch that claims reads the probing records
  and promotes before the next claim (:meth:`worker.engine.Engine._main`);
* leases are extended and stranded claims handed back at the busy cadence,
  since an idle engine holds none; expired leases are handed back every
  ``RECLAIM_EVERY`` as before.

The prober of each virtual shard (:mod:`worker.prober`) looks at its probe schedule every quarter of a
second at most, to see soon a probe asked for at once; on a Cluster, while that schedule is empty, once a
second (:func:`empty_schedule_pause`).

One Redis and plain shards keep the busy cadence throughout: their few engines'
polling costs little, and their behaviour stays as it was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .breaker import READ_EVERY

__all__ = ["BUSY", "CLUSTER_EMPTY_SCHEDULE", "CLUSTER_IDLE", "Pace", "empty_schedule_pause", "pace", "sleep_unless"]


@dataclass(frozen=True)
class Pace:
    """Seconds between an engine's promotions of due retries, its reads of the probing records, and the longest
    blocking wait on its queue."""

    promote_every: float
    breakers_every: float
    wait: float


# The cadence of an engine on one Redis or plain shards, and of a busy one on a Cluster.
BUSY = Pace(promote_every=0.1, breakers_every=READ_EVERY, wait=0.25)
# An idle engine of a Cluster's virtual shard: woken by its queue, it polls the rest about once a second.
CLUSTER_IDLE = Pace(promote_every=1.0, breakers_every=2.0, wait=1.0)


def pace(*, cluster: bool, idle: bool) -> Pace:
    """The cadence of an engine: paced out only when it is idle on a Redis Cluster."""
    return CLUSTER_IDLE if cluster and idle else BUSY


# A Cluster's prober with nothing in its shard's probe schedule looks at it again after this long.
CLUSTER_EMPTY_SCHEDULE = 1.0


def empty_schedule_pause(*, cluster: bool, busy_pause: float) -> float:
    """How long a prober whose probe schedule is empty waits before looking again: ``busy_pause``, or on a
    Redis Cluster :data:`CLUSTER_EMPTY_SCHEDULE`."""
    return max(busy_pause, CLUSTER_EMPTY_SCHEDULE) if cluster else busy_pause


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` (an engine's pause after a Redis error), or less if ``stop`` is set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
