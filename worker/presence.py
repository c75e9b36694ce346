"""A worker's presence in RQ's own registry, so ``rq info`` and rq-dashboard list it.

An ``svcgw worker`` is not an RQ worker (see ``worker.engine``), yet it is
monitored as one: it writes the keys a stock RQ worker writes, with rq's own
names and formats (both from ``svcgw.storage.rqformat``), so rq's
``Worker.all()`` reads them:

* the hash ``rq:worker:<name>``: birth, last_heartbeat, queues, pid, hostname,
  version, python_version, state (busy or idle), current_job (one of the
  deliveries it holds), successful_job_count (delivered attempts),
  failed_job_count (failed attempts) and total_working_time (seconds spent
  in attempts);
* its key in the set ``rq:workers`` and in ``rq:workers:<queue>``.

Nothing is written per delivery: attempts are counted in memory and written
with the heartbeat, every 5 seconds (or a third of ``SVCGW_WORKER_TTL``
when that is shorter): one pipeline of a few commands, whatever the load. The hash expires
``SVCGW_WORKER_TTL`` seconds after the last heartbeat, so a worker killed
without a word leaves the list by itself (rq drops a set member whose hash
is gone); one that stops cleanly records its death as RQ does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable

from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery.attempt import Attempt, Prepared
from svcgw.delivery.recording import AttemptHook
from svcgw.errors import STORAGE_ERRORS
from svcgw.logs import of_shard
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import (
    WORKER_COUNTS,
    WORKER_CURRENT_JOB,
    WORKER_KEPT_DEAD,
    rq_now,
    worker_death,
    worker_fields,
    worker_heartbeat,
)

from .engine import Engine

__all__ = ["Presence", "attach"]

log = logging.getLogger("svcgw")

HEARTBEAT_EVERY = 5.0  # seconds at most between heartbeats


class Presence:
    """One worker's RQ registration: born at :meth:`start`, kept alive by :meth:`serve`, dead at :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        redis: AsyncRedis,
        keys: KeySpace,
        name: str,
        held: Callable[[], list[str]] = list,
        *,
        shard: int | None = None,
    ) -> None:
        self.redis = redis
        # The shard it is registered on, named in its log lines when the worker has several (None: one).
        self.log = of_shard(log, shard)
        self.name = name
        self.key = keys.rq.worker_prefix + name
        self.queue_key = keys.rq.workers_of(settings.queue_name)
        self.workers_key = keys.rq.workers
        self.queue_name = settings.queue_name
        self.ttl = settings.worker_ttl
        # Often enough for the dashboard's counts to be current, rarely enough to cost nothing.
        self.interval = max(min(settings.worker_ttl / 3, HEARTBEAT_EVERY), 0.2)
        self._held = held
        self._successful = self._failed = 0
        self._working = 0.0
        self._born = False

    def count(self, attempt: Attempt) -> None:
        """Counted in memory; written with the next heartbeat."""
        if attempt.ok:
            self._successful += 1
        else:
            self._failed += 1
        self._working += attempt.duration

    async def start(self) -> None:
        """Register (RQ's ``register_birth``); with Redis away, the next heartbeat tries again."""
        try:
            await self._register()
        except STORAGE_ERRORS as exc:
            self.log.warning("could not register as an RQ worker yet (%s)", type(exc).__name__)

    async def _register(self) -> None:
        now = rq_now()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.key)
            born = worker_fields(self.queue_name, pid=os.getpid(), hostname=socket.gethostname(), now=now)
            pipe.hset(self.key, mapping=born)
            pipe.sadd(self.workers_key, self.key)
            pipe.sadd(self.queue_key, self.key)
            pipe.expire(self.key, self._expiry())
            await pipe.execute()
        self._born = True
        self.log.info("registered as RQ worker %s", self.name)

    def _expiry(self) -> int:
        return max(int(self.ttl + 0.999), 1)

    async def heartbeat(self) -> None:
        if not self._born:
            await self._register()
        held = sorted(self._held())
        successful, failed, working = self._successful, self._failed, self._working
        self._successful = self._failed = 0
        self._working = 0.0
        successful_field, failed_field, working_field = WORKER_COUNTS
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.key, mapping=worker_heartbeat(rq_now(), busy=bool(held)))
            if held:
                pipe.hset(self.key, WORKER_CURRENT_JOB, held[0])
            else:
                pipe.hdel(self.key, WORKER_CURRENT_JOB)
            pipe.hincrby(self.key, successful_field, successful)
            pipe.hincrby(self.key, failed_field, failed)
            pipe.hincrbyfloat(self.key, working_field, working)
            # Put back what a hash that expired meanwhile (a long pause) no longer lists.
            pipe.sadd(self.workers_key, self.key)
            pipe.sadd(self.queue_key, self.key)
            pipe.expire(self.key, self._expiry())
            try:
                await pipe.execute()
            except STORAGE_ERRORS:
                # Counted again with the next heartbeat rather than lost.
                self._successful += successful
                self._failed += failed
                self._working += working
                raise

    async def serve(self, stop: asyncio.Event) -> None:
        """Heartbeats until ``stop`` is set; Redis being away costs a heartbeat, not the worker."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                pass
            try:
                await self.heartbeat()
            except STORAGE_ERRORS as exc:
                self.log.warning("worker heartbeat failed (%s)", type(exc).__name__)

    async def stop(self) -> None:
        """RQ's death record: out of both sets, ``death`` set, the hash kept a minute."""
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.srem(self.workers_key, self.key)
                pipe.srem(self.queue_key, self.key)
                pipe.hset(self.key, mapping=worker_death(rq_now()))
                pipe.hdel(self.key, WORKER_CURRENT_JOB)
                pipe.expire(self.key, WORKER_KEPT_DEAD)
                await pipe.execute()
        except STORAGE_ERRORS as exc:
            # The hash expires by itself within SVCGW_WORKER_TTL.
            self.log.warning("could not record the worker's death (%s)", type(exc).__name__)


def attach(engine: Engine, settings: Settings, redis: AsyncRedis, *, shard: int | None = None) -> Presence:
    """The engine's presence (on ``shard``, of several); its attempts are counted by the engine's ``on_attempt``."""
    presence = Presence(settings, redis, engine.keys, engine.name, held=engine.held, shard=shard)
    previous: AttemptHook | None = engine.on_attempt

    def counted(prepared: Prepared, attempt: Attempt, step: str) -> None:
        presence.count(attempt)
        if previous is not None:
            previous(prepared, attempt, step)

    engine.on_attempt = counted
    return presence
