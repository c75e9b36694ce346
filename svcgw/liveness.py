"""Instance liveness state, kept in the instance hash.

Fields: ``maintained`` ("1" while the service keeps the long connection up:
from ``long/start`` until ``long/stop`` or ``logout``), ``status`` (online,
offline, stopped, logged_out), ``reason``, ``action_required``, ``since``,
``proxy`` (the last one the caller used, for reconnecting without a scan),
``last_probe``, ``next_probe``, ``last_seen``. The probe schedule is the
sorted set ``svcgw:probe:schedule`` (appid scored by next probe time).

The gateway calls the ``mark_*`` and ``record_proxy`` functions after the
capability layer accepted the matching operation.
"""

from __future__ import annotations

import random
import time

from redis.asyncio import Redis

from . import keys

__all__ = ["mark_logged_out", "mark_started", "mark_stopped", "record_proxy"]


async def mark_started(redis: Redis, appid: str, probe_interval: float) -> None:
    """After ``long/start``: maintained again; first probe within one interval, spread at random."""
    now = time.time()
    due = now + random.uniform(0.5, 1.0) * probe_interval
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(
            keys.instance(appid),
            mapping={"maintained": "1", "status": "online", "since": repr(now), "next_probe": repr(due)},
        )
        pipe.hdel(keys.instance(appid), "reason", "action_required")
        pipe.zadd(keys.PROBE_SCHEDULE, {appid: due})
        await pipe.execute()


async def mark_stopped(redis: Redis, appid: str) -> None:
    """After ``long/stop``: not probed, not restarted, until the next ``long/start``."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(keys.instance(appid), mapping={"maintained": "0", "status": "stopped", "since": repr(time.time())})
        pipe.hdel(keys.instance(appid), "next_probe", "reason", "action_required")
        pipe.zrem(keys.PROBE_SCHEDULE, appid)
        await pipe.execute()


async def mark_logged_out(redis: Redis, appid: str) -> None:
    """After ``login/logout``: the session key is gone; nothing to probe until a new login."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(
            keys.instance(appid), mapping={"maintained": "0", "status": "logged_out", "since": repr(time.time())}
        )
        pipe.hdel(keys.instance(appid), "next_probe", "reason", "action_required")
        pipe.zrem(keys.PROBE_SCHEDULE, appid)
        await pipe.execute()


async def record_proxy(redis: Redis, appid: str, proxy: str) -> None:
    """The proxy of the caller's last login call, reused to reconnect with the same egress."""
    await redis.hset(keys.instance(appid), "proxy", proxy)
