"""worker.idlepace: an idle engine's and an empty probe schedule's cadence, paced out only on a Redis Cluster."""

from __future__ import annotations

from worker.breaker import READ_EVERY
from worker.idlepace import BUSY, CLUSTER_EMPTY_SCHEDULE, CLUSTER_IDLE, empty_schedule_pause, pace


def test_one_redis_and_plain_shards_keep_the_busy_cadence_idle_or_not() -> None:
    assert pace(cluster=False, idle=True) == pace(cluster=False, idle=False) == BUSY
    assert BUSY.breakers_every == READ_EVERY


def test_a_cluster_engine_paces_out_only_while_idle() -> None:
    assert pace(cluster=True, idle=False) == BUSY
    idle = pace(cluster=True, idle=True)
    assert idle == CLUSTER_IDLE
    assert idle.promote_every > BUSY.promote_every
    assert idle.breakers_every > BUSY.breakers_every
    assert idle.wait > BUSY.wait


def test_an_empty_probe_schedule_is_looked_at_less_often_only_on_a_cluster() -> None:
    assert empty_schedule_pause(cluster=False, busy_pause=0.25) == 0.25
    assert empty_schedule_pause(cluster=True, busy_pause=0.25) == CLUSTER_EMPTY_SCHEDULE
    assert empty_schedule_pause(cluster=True, busy_pause=2.0) == 2.0
