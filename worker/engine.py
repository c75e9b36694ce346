"""The delivery engine: many deliveries at once in one worker process.

A stock RQ worker runs one job at a time (and forks per job), which leaves a
process idle for as long as a slow endpoint takes to answer. The engine
instead runs every attempt as a task on one asyncio event loop (uvloop when installed), sends
with aiohttp (:mod:`svcgw.callbacks.outbound`) and talks to Redis in batches:

* one script claims up to ``CLAIM_BATCH`` jobs and returns, with each, the delivery's fields and its
  callback configuration (the prepare stage reads nothing more; :mod:`svcgw.delivery.claim`);
* finished attempts are collected and recorded by one script call for all of them, whatever their
  outcome (:mod:`svcgw.delivery.recording`).

The main loop:

* reads which destinations are probed, and brings forward the held-back jobs
  of those that answer again;
* promotes retries that are due (RQ's scheduled registry) to the queue;
* hands back jobs whose lease ran out (their worker died);
* extends the leases of the jobs it holds;
* claims as many jobs as it has free slots, or blocks until one arrives.

Before it is sent, an attempt takes its slots (:mod:`worker.gate`): one failing
destination, hanging account or busy host cannot take every slot; a job over
a cap waits in the worker or goes back to the scheduled registry without
counting an attempt. The claim holds such jobs back itself as it pops them,
and the jobs of an instance a claim read lately are held back unread
(:class:`svcgw.delivery.claim.Sightings`); one the claim did not recognise is
deferred with the next batch of finished attempts.

Every exception in an attempt, whatever raised it, is a failed attempt:
recorded, retried on the schedule, and in the end a dead letter. Only a
shutdown hands a job back without an attempt.

Ordering rules: an attempt's slot is freed, its claim forgotten, and the
``on_attempt`` hook called only after its outcome is stored in Redis. Until
then the lease is extended, so a worker that dies meanwhile loses nothing:
the job is handed back and tried again. A claim held longer than any attempt
takes (:func:`svcgw.delivery.stranded.ceiling`), its outcome not waiting on
Redis, is stranded: its attempt is cancelled and the job handed back, logged,
counted, and noted for ``/readyz`` until it is attempted again
(:mod:`svcgw.delivery.stranded`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from svcgw.callbacks.outbound import Sender, sender_for
from svcgw.config.settings import Settings
from svcgw.counters import AttemptRecorder
from svcgw.delivery import breaker, failingorigins, stranded
from svcgw.delivery.attempt import Attempt, Openings, prepare_claimed, prepared_leniently, unexpected
from svcgw.delivery.queue import Claimed, DeliveryQueue, Finish, Finished
from svcgw.delivery.recording import AttemptHook, Outcomes
from svcgw.errors import STORAGE_ERRORS
from svcgw.logs import of_shard
from svcgw.shards.clients import spaces
from svcgw.shards.connections import async_client
from svcgw.storage.keys import KeySpace
from svcgw.vault import TokenVault

from .breaker import READ_EVERY
from .concurrencycaps import LINE_WAIT
from .gate import Gate, Held, lane
from .idlepace import BUSY, pace, sleep_unless
from .sending import send
from .sharedslots import SharedSlots

__all__ = ["Engine", "lane", "loop_factory"]

log = logging.getLogger("svcgw.delivery")

PROMOTE_EVERY = BUSY.promote_every
PROMOTE_LIMIT = 1000
RECLAIM_EVERY = 1.0
CLAIM_BATCH = 100
# A claim asks for more ids when many of the last ones went back unstarted, up to this many.
CLAIM_MOST = 2 * CLAIM_BATCH
IDLE_WAIT = BUSY.wait
STRANDED_NAMED = 20  # stranded deliveries named in the log line that hands them back
UNPARK_CALLS = 100  # script calls at most that bring one destination's held-back jobs forward at once


def worker_name() -> str:
    return f"svcgw.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(3)}"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


@dataclass(slots=True)
class _Claim:
    """A claim the engine holds: when it was claimed (monotonic), its delivery's attempts then, its attempt's task."""

    since: float
    attempts: int
    task: asyncio.Task[None]


class Engine:
    """Runs deliveries until stopped.

    ``redis`` may be a ``redis.asyncio`` client (bytes, not decoded), which
    the engine uses as it is, with ``keys``, its shard's names. Any other value
    (a synchronous client, or None) makes the engine open its own asyncio client
    from ``settings`` (``svcgw.shards.connections.async_client``), which reaches the same
    Redis: shard 0's, whose names ``keys`` defaults to.

    ``client`` replaces the aiohttp sender with any
    :class:`svcgw.callbacks.outbound.Sender` (tests, an in-process run). It is not
    closed by the engine.
    """

    def __init__(
        self,
        settings: Settings,
        redis: object | None,
        vault: TokenVault,
        *,
        client: Sender | None = None,
        name: str | None = None,
        on_attempt: AttemptHook | None = None,
        keys: KeySpace | None = None,
        shard: int | None = None,
    ) -> None:
        self.settings = settings
        self.keys = keys if keys is not None else spaces(settings.shard_layout)[0]
        # The shard it delivers for, named in its log lines when the worker has several (None: one).
        self.log = of_shard(log, shard)
        # Every attempt opens its destination's secret and token: the same few, over and over.
        self.vault = vault.remembering()
        self.openings = Openings(self.vault)
        self.name = name or worker_name()
        self.capacity = settings.delivery_concurrency
        # A recorder of the engine's own is flushed and closed when the engine stops.
        self._recorder = AttemptRecorder(settings, self.keys) if on_attempt is None else None
        self.on_attempt = on_attempt if on_attempt is not None else self._recorder
        # The slots its attempts take (shared by the engines of one process: worker.main).
        self.gate = Gate(settings)
        self._breakers_stale = True  # read the shard's records at the next turn
        # The stock Cluster client answers as one Redis does.
        self._given_redis = cast(AsyncRedis, redis) if isinstance(redis, AsyncRedis | AsyncRedisCluster) else None
        self._given_client = client
        self._held: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._claims: dict[str, _Claim] = {}
        # Past this many seconds held, a claim whose outcome is not waiting on Redis is stranded.
        self.longest_hold = stranded.ceiling(settings, LINE_WAIT)
        self._low_water = max(1, min(CLAIM_BATCH, self.capacity // 8))
        self.shared = SharedSlots(self.capacity, self._low_water)  # its claims' slots; a Cluster's worker's: main
        # The share of popped ids that claims started lately. Jobs of a busy account or a
        # saturated destination go back without taking a slot, and a claim that started only
        # three in four would need a third more round trips to fill the same slots.
        self._started_share = 1.0

    # --- entry point ---------------------------------------------------------------
    async def serve(self, stop: asyncio.Event, *, burst: bool = False) -> None:
        """Deliver on the running event loop until ``stop`` is set (or, with ``burst``, until nothing is left)."""
        redis = self._given_redis or async_client(self.settings)
        if self._recorder is not None:
            self._recorder.lend(redis)
        sender = self._sender()
        self.queue = DeliveryQueue(
            redis,
            self.keys,
            self.settings.queue_name,
            lease_seconds=self.settings.lease_seconds,
            failing_argument=failingorigins.script_argument(self.settings),
            breaker_argument=breaker.script_argument(self.settings),
            log_retention=self.settings.log_retention,
            # Longer than any job held back for a destination being probed waits (worker.breaker).
            park_seconds=breaker.PARK_SECONDS + self.settings.delivery_timeout + 60,
            disabled_recheck=self.settings.disabled_recheck_seconds,
        )
        self.gate.breakers.join(self.keys)
        self.sender = sender
        self.outcomes = Outcomes(self.settings, self.queue, self.on_attempt, self._ended)
        self._slot_freed = asyncio.Event()
        flusher = self._flusher = asyncio.create_task(self.outcomes.run(), name="finish-flusher")
        self.log.info("delivery engine %s started with %d slots", self.name, self.capacity)
        try:
            await self._main(stop, burst)
        finally:
            try:
                await self._shutdown()
            finally:
                flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
                if self._recorder is not None:
                    await self._recorder.aclose()
                if self._given_client is None:
                    await sender.aclose()
                if self._given_redis is None:
                    await redis.aclose()
                self.log.info("delivery engine %s stopped", self.name)

    def held(self) -> list[str]:
        return list(self._held)

    def _sender(self) -> Sender:
        if self._given_client is not None:
            return self._given_client
        return sender_for(self.settings)

    # --- main loop -----------------------------------------------------------------
    async def _main(self, stop: asyncio.Event, burst: bool) -> None:
        next_promote = next_reclaim = next_extend = next_breakers = next_resolve = 0.0
        failures = 0
        # Idle on a Cluster, an engine of one of its virtual shards paces its polling out (worker.idlepace);
        # a blocking wait stays well inside the client's read timeout.
        cluster, idle, scheduled_empty = self.settings.shard_layout.cluster, False, False
        longest_wait = max(IDLE_WAIT, self.settings.redis_socket_timeout / 2)
        while not stop.is_set():
            try:
                now = time.time()
                cadence = pace(cluster=cluster, idle=idle)
                if now >= next_breakers or self._breakers_stale:
                    self._breakers_stale = False
                    records = await self.queue.breaker_records(*breaker.read_argument(self.settings))
                    self.gate.breakers.update(self.keys, records)
                    next_breakers = now + cadence.breakers_every
                if await self._unpark():
                    next_promote = now
                # Idle, the promotion and the hand-back of expired leases share a turn: one wake-up a second.
                promote = now >= next_promote or (idle and now >= next_reclaim)
                if promote:
                    promotion = await self.queue.promote_due(PROMOTE_LIMIT)
                    while promotion.moved >= PROMOTE_LIMIT:
                        promotion = await self.queue.promote_due(PROMOTE_LIMIT)
                    # Known empty only when this engine holds nothing that could schedule a retry after it.
                    scheduled_empty = promotion.next_due is None and not self._held and not self.outcomes.waiting
                    next_promote = now + cadence.promote_every
                    if promotion.next_due is not None:
                        next_promote = max(min(next_promote, promotion.next_due), now + 0.005)
                if now >= next_reclaim or (idle and promote):
                    await self.queue.reclaim_expired()
                    next_reclaim = now + RECLAIM_EVERY
                if now >= next_extend:
                    await self._hand_back_stranded()
                    await self.queue.extend(self.held())
                    next_extend = now + min(self.settings.lease_seconds / 3, stranded.RESOLVE_EVERY)
                if now >= next_resolve:
                    await stranded.resolve(self.queue.redis, self.keys)
                    next_resolve = now + stranded.RESOLVE_EVERY
                free = self.shared.room(self, self._slot_freed, self.capacity - len(self._held))
                # Claim in batches: a slot or two freed under full load waits
                # for a few more rather than costing a round trip each.
                if free >= self._low_water or (free > 0 and not self._held):
                    gate = self.gate
                    claimed = await self.queue.claim_batch(
                        self._claim_size(free), self.name, gate.saturated(self.keys), gate.accounts.saturated()
                    )
                    self._started(len(claimed), self.queue.popped)
                    failures = 0
                    if self.queue.popped:
                        scheduled_empty = False  # the claim may have held some back there
                    for job in claimed:
                        self._start(job)
                    if claimed:
                        if idle:
                            # Busy again: back to the busy cadence from now on.
                            idle = False
                            next_promote = min(next_promote, now + PROMOTE_EVERY)
                            next_breakers = min(next_breakers, now + READ_EVERY)
                        continue
                failures = 0
                if burst and not self._held and not self.outcomes.waiting and not await self.queue.pending():
                    break
                idle = cluster and scheduled_empty and not self._held and not self.outcomes.waiting
                wait = min(next_promote, next_reclaim, next_extend) - time.time()
                wait = min(max(wait, 0.005), min(pace(cluster=cluster, idle=idle).wait, longest_wait))
                if free >= self._low_water:
                    if await self.queue.wait(wait) and idle:
                        # Woken by a job after an idle stretch: claim it under fresh probing records.
                        self._breakers_stale = True
                else:
                    self._slot_freed.clear()
                    try:
                        await asyncio.wait_for(self._slot_freed.wait(), wait)
                    except TimeoutError:
                        pass
            except STORAGE_ERRORS as exc:
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                self.log.warning("redis unavailable (%s); retrying in %.1fs", type(exc).__name__, delay)
                await sleep_unless(stop, delay)

    def _claim_size(self, free: int) -> int:
        """How many ids to pop (reserved) for ``free`` slots: more when claims have been starting fewer than popped."""
        wanted = min(free, CLAIM_BATCH)
        return self.shared.reserve(self, min(free, CLAIM_MOST, round(wanted / self._started_share)))

    def _started(self, started: int, popped: int) -> None:
        self.shared.settle(self, started)
        if popped:
            # Never below a quarter: a claim never pops more than four times what it may start.
            self._started_share = max(0.25, 0.7 * self._started_share + 0.3 * started / popped)

    async def _unpark(self) -> int:
        """Bring forward the held-back jobs of the destinations that answer again (svcgw.delivery.breaker)."""
        moved = 0
        for destination in self.gate.breakers.unparking(self.keys):
            due = 0
            for _ in range(UNPARK_CALLS):
                brought, left = await self.queue.unpark(destination)
                due += brought
                if not left:
                    break
            if due:
                account, _, origin = destination.partition(" ")
                self.log.info("held-back deliveries due now",
                              extra={"destination": origin, "account": account, "count": due})  # fmt: skip
            moved += due
        return moved

    def _start(self, job: Claimed) -> None:
        self._held.add(job.delivery_id)
        task = asyncio.create_task(self._attempt(job))
        self._tasks.add(task)  # until its last step: _attempt discards it (no done-callback's turn of the loop)
        attempts = job.fields.get("attempts")
        self._claims[job.delivery_id] = _Claim(time.monotonic(), int(attempts or 0), task)

    async def _hand_back_stranded(self) -> None:
        """Hand back the claims held past :attr:`longest_hold` whose attempt has not ended (stranded).

        An outcome waiting for Redis to store it is not stranded: it is stored as soon as Redis answers.
        """
        now = time.monotonic()
        waiting = self.outcomes.waiting_ids()
        exempt = waiting if not self._flusher.done() and not self.outcomes.stalled(now, self.longest_hold) else set()
        late = stranded.overdue({i: claim.since for i, claim in self._claims.items()}, now, self.longest_hold, exempt)
        if not late:
            return
        claims = {delivery_id: self._claims.pop(delivery_id) for delivery_id in late}
        for delivery_id, claim in claims.items():
            self._unhold(delivery_id)
            claim.task.cancel()
        self.outcomes.forget(set(late))
        self.log.warning(
            "%d deliveries held for more than %.0fs without their attempt ending; handing them back: %s",
            len(late),
            self.longest_hold,
            " ".join(late[:STRANDED_NAMED]) + (" ..." if len(late) > STRANDED_NAMED else ""),
            extra={"count": len(late)},
        )
        try:
            await self.queue.release(late)
            await stranded.record(self.queue.redis, self.keys, {i: claim.attempts for i, claim in claims.items()})
        except STORAGE_ERRORS as exc:
            # No longer extended: their leases run out and the claim's reclaim hands them back.
            self.log.warning("could not hand back %d stranded deliveries (%s); their leases will run out",
                             len(late), type(exc).__name__)  # fmt: skip

    async def _shutdown(self) -> None:
        """Let attempts in flight finish, and their outcomes be stored, within the delivery timeout; hand back the
        rest."""
        deadline = time.monotonic() + self.settings.delivery_timeout + 2
        while running := [task for task in self._tasks if not task.done()]:
            if time.monotonic() >= deadline:
                break
            await asyncio.wait(running, timeout=max(deadline - time.monotonic(), 0.01))
        if not self._flusher.done():
            try:
                await asyncio.wait_for(self.outcomes.drained(), max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                pass
        leftover = self.held()
        self.outcomes.forget(set(leftover))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if leftover:
            try:
                released = await self.queue.release(leftover)
                self.log.info("handed back %d deliveries on shutdown", released)
            except STORAGE_ERRORS:
                self.log.warning("could not hand back %d deliveries; their leases will expire", len(leftover))

    # --- one attempt ---------------------------------------------------------------
    async def _attempt(self, job: Claimed) -> None:
        """One claim's attempt; its end is queued for the outcomes' next batch and the claim freed once that is
        stored (:meth:`_ended`), or at once when it ends without one."""
        delivery_id = job.delivery_id
        queued = False
        try:
            queued = await self._run_attempt(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Not an attempt that is handed back and tried again for ever: a
            # failed one, retried on the schedule and in the end a dead letter.
            self.log.exception("delivery %s: the attempt failed unexpectedly", delivery_id)
            now = time.time()
            try:
                failed = Attempt(ok=False, at=now, duration=0.0, error=unexpected(exc))
                self.outcomes.record(prepared_leniently(job), failed)
                queued = True
            except Exception:
                # The claim stays in Redis and its lease is no longer extended:
                # the job is handed back and tried again, nothing is lost.
                self.log.exception("delivery %s: the failed attempt could not be recorded", delivery_id)
        finally:
            task = asyncio.current_task()
            self._tasks.discard(task)
            if not queued:
                self._release_claim(delivery_id, task)

    def _ended(self, delivery_id: str, finished: Finished, origin: str) -> None:
        """A claim's end is stored (:class:`svcgw.delivery.recording.Outcomes`): what it told of its origin's
        breaker, and its slot freed."""
        if finished.probe_changed:
            self._breakers_stale = True
        if finished.reopened:
            self.gate.breakers.reopened(origin)
        claim = self._claims.get(delivery_id)
        self._release_claim(delivery_id, claim.task if claim is not None else None)

    def _release_claim(self, delivery_id: str, task: asyncio.Task[None] | None) -> None:
        """The engine no longer holds ``delivery_id`` (claimed by ``task``): its slot is free for the next claim."""
        self._unhold(delivery_id)
        claim = self._claims.get(delivery_id)
        if claim is not None and claim.task is task:
            del self._claims[delivery_id]
        self._slot_freed.set()

    def _unhold(self, delivery_id: str) -> None:
        if delivery_id in self._held:
            self._held.remove(delivery_id)
            self.shared.ended()

    async def _run_attempt(self, job: Claimed) -> bool:
        """Whether the claim's end was queued (else it ended without one: the claim is freed at once)."""
        delivery_id = job.delivery_id
        prepared = prepare_claimed(job, self.openings)
        if prepared is None:
            self.log.warning("delivery %s: its data expired; dropping the job", delivery_id)
            self.outcomes.end(Finish(delivery_id, "", "drop"))
            return True
        held = await self.gate.take(prepared)
        if not isinstance(held, Held):  # a cap is full: the job is tried again in that many seconds
            self.outcomes.end(Finish(delivery_id, prepared.appid, "defer", due=time.time() + held))
            return True
        try:
            attempt = await send(self.sender, prepared)
        except Exception as exc:
            # send() turns every failure into an Attempt; this is the last resort.
            self.log.exception("delivery %s: sending failed unexpectedly", delivery_id)
            attempt = Attempt(ok=False, at=time.time(), duration=0.0, error=unexpected(exc))
        finally:
            self.gate.free(held)
        probe = self.gate.breakers.mark(held.origin, timed_out=attempt.timed_out, started=attempt.at)
        self.outcomes.record(prepared, attempt, probe, held.origin)
        return True

