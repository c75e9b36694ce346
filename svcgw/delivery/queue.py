"""The delivery queue: claiming, leasing, scheduling and finishing RQ jobs.

Each transition is one Lua script, so it is atomic however many workers run
and costs one round trip; the engine's scripts work on a batch of jobs at a
time. The keys are RQ's own where RQ has one:

* ``rq:queue:<q>``: ready jobs, oldest first;
* ``rq:scheduled:<q>``: retries, scored by due time (RQ's scheduled registry);
* ``rq:failed:<q>``: dead letters, scored by expiry (RQ's failed registry,
  ``svcgw.storage.rqformat.failed_score``);
* ``svcgw:inflight:<q>``: claimed jobs, scored by lease expiry. A worker
  extends the leases of what it holds; a lease that runs out (the worker was
  killed) puts the job back at the front of the queue. Delivery is
  therefore at least once;
* ``rq:deferred:<q>``: service events waiting for an earlier one of their
  instance (RQ's deferred registry); finishing that one queues the next
  (``svcgw.delivery.queueing``, ``svcgw/storage/lua/chain.lua``).

The job hash (``rq:job:<id>``) keeps RQ's ``status`` current (queued,
started, scheduled, failed with ``exc_info``: the statuses and fields of
``svcgw.storage.rqformat``, which the scripts spell) so that rq-dashboard and
``rq requeue`` work on deliveries; a delivered job's hash is deleted, as RQ
does with ``result_ttl=0``. One exception: a job the claim holds back at
the pop, for a busy account or a full destination, waits in the scheduled
registry a few seconds with the status ``queued``, as it was; the pop
cannot name its hash (:mod:`svcgw.delivery.claim`).

A claim returns what the attempt needs along with the id: the delivery's
fields and the callback configuration of its instance (and of its account
when the instance has no address of its own), or of the further destination
it goes to: :mod:`svcgw.delivery.claim`.

:class:`DeliveryQueue` takes a ``redis.asyncio`` client; its scripts are
``svcgw/storage/lua/queue_*.lua``, each naming in KEYS every key it touches.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from redis.asyncio import Redis as AsyncRedis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import breaker, chainkeys, failingorigins
from svcgw.delivery.outcomes import OUTCOME_WINDOW, late_bucket, late_expire_at
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import SCHEDULED, STARTED, rq_now
from svcgw.storage.scripts import register

from .claim import DELIVERY_FIELDS, Claimed, Claimer, Hold

__all__ = [
    "DELIVERY_FIELDS",
    "Claimed",
    "DeliveryQueue",
    "Finish",
    "Finished",
    "Hold",
    "Promotion",
]

# Besides an attempt's outcome (delivered, retry, dead), a claim can end in ``defer``
# (back to the scheduled registry without an attempt) or ``drop`` (the delivery's data expired).
FinishKind = Literal["delivered", "retry", "dead", "defer", "drop"]


# What the finish script is told of a claim this queue did not make: look its chain up.
_CHAIN_UNKNOWN = "?"
# The finish's answer bit for a chain whose front it could not advance (svcgw.delivery.chainkeys).
_CHAIN_UNNAMED = 8
# Instances whose keys a queue remembers for its finishes.
_INSTANCES_KEPT = 4096


@dataclass(frozen=True)
class Promotion:
    moved: int
    next_due: float | None


@dataclass(slots=True)
class Finish:
    """How one claim ends; ``record`` is the attempt's JSON record (none for defer and drop)."""

    delivery_id: str
    appid: str
    kind: FinishKind
    record: bytes = b""
    due: float | None = None  # retry and defer: when; dead: when the dead letter expires
    retention: int = 0  # seconds the delivery record is kept from now
    error: bytes = b""  # dead: RQ's exc_info (zlib)
    # The failing record the attempt moves: its account's and destination's (svcgw.delivery.failingorigins.name);
    # '' for none
    failing: str = ""
    # delivered: the body's event ids (svcgw.delivery.view.stored_ids), kept instead of the body,
    # which the callback log holds already; b"" keeps the body
    event_ids: bytes = b""
    # What the attempt tells of its destination's probing (svcgw.delivery.breaker): "t:<when it started>"
    # it timed out, "a" it answered a destination held probed, "" nothing
    probe: str = ""
    # The probing record the mark moves: the account's and the destination's (svcgw.delivery.breaker.name)
    probing: str = ""
    # dead: what rq-dashboard shows of it (svcgw.delivery.recording.dead_letter_shown); b"" writes nothing more
    shown: bytes = b""


@dataclass(slots=True)
class Finished:
    """How storing one claim's end went: ``held`` is False when the claim had been lost meanwhile."""

    held: bool
    # This attempt made its account's destination a failing one (svcgw.delivery.failingorigins).
    started_failing: bool = False
    recovered: bool = False  # this attempt ended its account's destination's failing
    probe_changed: bool = False  # this attempt changed its destination's probing record
    reopened: bool = False  # the first answer of its destination after timeouts
    probe_began: bool = False  # its destination is probed from this attempt on
    probe_ended: bool = False  # its destination is back at its caps


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class DeliveryQueue:
    """The queue through a ``redis.asyncio`` client (bytes, not decoded)."""

    def __init__(
        self,
        redis: AsyncRedis,
        keys: KeySpace,
        queue_name: str,
        *,
        lease_seconds: float = 30.0,
        failing_argument: str | None = None,
        breaker_argument: str | None = None,
        log_retention: int = 86400,
        park_seconds: float = 2 * breaker.PARK_SECONDS,
        disabled_recheck: float = 30.0,
    ) -> None:
        self.redis = redis
        self.keys = keys
        # How long a delivered delivery's bare outcome is kept, like its post in the callback log.
        self.log_retention = log_retention
        # The finish script's thresholds for failing destinations (svcgw.delivery.failingorigins.script_argument).
        self.failing_argument = failing_argument or failingorigins.script_argument(Settings())
        # Its caps and probing floor (svcgw.delivery.breaker.script_argument).
        self.breaker_argument = breaker_argument or breaker.script_argument(Settings())
        self.name = queue_name
        self.lease_seconds = lease_seconds
        self.queue_key = keys.rq.queue(queue_name)
        self.inflight_key = keys.inflight(queue_name)
        self.scheduled_key = keys.rq.scheduled(queue_name)
        self.failed_key = keys.rq.failed(queue_name)
        self._claimer = Claimer(
            redis, keys, self.queue_key, self.inflight_key, self.scheduled_key, lease_seconds,
            park_seconds=park_seconds, disabled_recheck=disabled_recheck,
        )  # fmt: skip
        self._promote = register(redis, "queue_promote")
        self._breaker_read = register(redis, "breaker_read")
        self._unpark = register(redis, "queue_unpark")
        self._mark = register(redis, "queue_mark")
        # With chain.lua: a service event delivered or dead lets its instance's next one go.
        self._finish = register(redis, "queue_finish")
        self.deferred_key = keys.rq.deferred(queue_name)
        self._release = register(redis, "queue_release")
        # The chain key of each claim this queue holds ("" for a customer event), known from
        # the claim, so that finishing a customer event costs no read of its own.
        self._chains: dict[str, str] = {}
        self._instances: dict[tuple[str, int], tuple[str, str, str]] = {}  # _instance_keys

    async def wait(self, timeout: float) -> bool:
        """Block until the queue is non-empty or ``timeout`` passes, without taking anything.

        BLMOVE from the queue's head to its own head changes nothing but wakes
        up as soon as a job arrives.
        """
        # Redis takes fractional timeouts for blocking commands; the stub says int.
        result = await self.redis.blmove(
            self.queue_key, self.queue_key, max(timeout, 0.01), "LEFT", "LEFT"  # type: ignore[arg-type]
        )  # fmt: skip
        return result is not None

    async def claim_batch(
        self,
        count: int,
        worker_name: str,
        saturated: Mapping[str, Hold | float] | None = None,
        busy_accounts: Mapping[str, float] | None = None,
    ) -> list[Claimed]:
        """Claim up to ``count`` jobs with their data (:class:`svcgw.delivery.claim.Claimer`).

        ``saturated`` maps destinations (``urlsplit(url).netloc``, lower
        case) that have no free slot to when their jobs are due again (a
        :class:`svcgw.delivery.claim.Hold`, or a time), and ``busy_accounts`` does the
        same for accounts: those jobs go back to the scheduled registry
        instead of being claimed.
        """
        holds = {k: v if isinstance(v, Hold) else Hold(v) for k, v in (saturated or {}).items()}
        claimed = await self._claimer.claim(count, worker_name, holds, busy_accounts or {})
        if self._claimer.unread:
            # Owners that kept changing under the read (never seen: an instance keeps its
            # account): the jobs go back to the front of the queue rather than be attempted.
            await self.release(self._claimer.unread)
        for job in claimed:
            # The field names the chain as it was named when queued (perhaps untagged, before the
            # upgrade renamed it: svcgw.storage.renames); the instance's tagged name is the one to touch.
            appid = _text(job.fields.get("appid") or b"")
            self._chains[job.delivery_id] = self.keys.service_events(appid) if job.fields.get("chain") and appid else ""
        return claimed

    @property
    def popped(self) -> int:
        """How many ids the last claim popped, started or not."""
        return self._claimer.popped

    async def extend(self, ids: Sequence[str]) -> None:
        """Push the leases of the jobs this worker holds ``lease_seconds`` into the future."""
        if ids:
            await self.redis.zadd(self.inflight_key, dict.fromkeys(ids, time.time() + self.lease_seconds), xx=True)

    async def promote_due(self, limit: int = 1000) -> Promotion:
        """Move retries that are due into the queue; returns how many and when the next is due."""
        return await self._move(self.scheduled_key, limit, front=False)

    async def reclaim_expired(self, limit: int = 1000) -> Promotion:
        """Hand back jobs whose worker stopped extending its lease."""
        return await self._move(self.inflight_key, limit, front=True)

    async def _move(self, source_key: str, limit: int, *, front: bool) -> Promotion:
        args: list[Any] = [time.time(), limit, "front" if front else "back"]
        following, *moved = cast(list[Any], await self._promote(keys=[source_key, self.queue_key], args=args))
        if moved:
            # Reclaimed jobs were started; promoted ones scheduled (or, held back by a busy
            # destination or account, scheduled by the claim).
            had = STARTED if front else SCHEDULED
            await self._mark(keys=[self.keys.rq.job(_text(job_id)) for job_id in moved], args=[had])
        return Promotion(len(moved), float(following) if following else None)

    async def breaker_records(self, open_kept: float, forget: float) -> dict[str, breaker.BreakerRecord]:
        """The shard's records of destinations being probed, the lapsed ones forgotten (``breaker_read.lua``)."""
        flat = cast(list[Any], await self._breaker_read(keys=[self.keys.breakers],
                                                         args=[time.time(), open_kept, forget]))  # fmt: skip
        found: dict[str, breaker.BreakerRecord] = {}
        for i in range(0, len(flat) - 1, 2):
            name = _text(flat[i])
            record = breaker.parse(name, flat[i + 1])
            if record is not None:
                found[name] = record
        return found

    async def unpark(self, destination: str, limit: int = 1000) -> tuple[int, int]:
        """Bring the jobs held back for ``destination`` forward to now; how many, and how many are left to look at."""
        moved, left = cast(list[Any], await self._unpark(keys=[self.scheduled_key, self.keys.parked(destination)],
                                                         args=[time.time(), limit]))  # fmt: skip
        return int(moved), int(left)

    async def finish_detailed(self, items: Sequence[Finish]) -> list[Finished]:
        """End claims; for each, whether the claim was still held and what changed for its destination."""
        if not items:
            return []
        chains = await self._chain_keys(items)
        # The chains this batch may advance, read now: only a service event's (or a claim's not ours).
        touched = dict.fromkeys(chains[i.delivery_id] for i in items if self._chains.get(i.delivery_id) != "")
        members = await chainkeys.read(self.redis, self.keys, list(touched))
        now, ended = time.time(), rq_now()
        bucket = late_bucket(now, self.log_retention)
        args: list[Any] = [
            now,
            ended,
            self.failing_argument,
            self.log_retention,
            late_expire_at(bucket, self.log_retention),
            OUTCOME_WINDOW,
            len(members),
            self.breaker_argument,
            *members,
        ]
        script_keys = [
            self.inflight_key,
            self.scheduled_key,
            self.failed_key,
            self.queue_key,
            self.deferred_key,
            self.keys.failing_origins,
            self.keys.breakers,
        ]
        for item in items:
            named = deliveryid.parse_named(item.delivery_id)
            chain = self._chains.get(item.delivery_id, _CHAIN_UNKNOWN)
            script_keys.extend(
                (
                    self.keys.delivery(item.delivery_id),
                    self.keys.delivery_attempts(item.delivery_id),
                    self.keys.rq.job(item.delivery_id),
                    self.keys.rq.result(item.delivery_id),
                    *self._instance_keys(item.appid, bucket),
                    chains[item.delivery_id],
                )
            )
            args.extend(
                (
                    item.kind,
                    item.delivery_id,
                    item.record,
                    "" if item.due is None else repr(item.due),
                    item.retention,
                    item.error,
                    item.failing,
                    chain,
                    item.event_ids,
                    named[1] if named else "",
                    item.probe,
                    item.probing if item.probe else "",
                    item.shown,
                )
            )
        script_keys.extend(chainkeys.member_keys(self.keys, members))
        answers = [int(x) for x in cast(list[Any], await self._finish(keys=script_keys, args=args))]
        for item, answer in zip(items, answers, strict=True):
            self._chains.pop(item.delivery_id, None)  # the claim has ended
            if answer & _CHAIN_UNNAMED:
                # A service event queued after the read reached the chain's front.
                await chainkeys.advance(
                    self.redis, self.keys, chains[item.delivery_id], self.queue_key, self.deferred_key, ended
                )
        started, recovered = failingorigins.STARTED, failingorigins.RECOVERED
        return [
            Finished(bool(x & 1), bool(x & started), bool(x & recovered), bool(x & breaker.CHANGED),
                     bool(x & breaker.REOPENED), bool(x & breaker.BEGAN), bool(x & breaker.ENDED))
            for x in answers
        ]  # fmt: skip

    def _instance_keys(self, appid: str, bucket: int) -> tuple[str, str, str]:
        """The keys of ``appid`` a finish names: its dead letters, its outcomes and its late outcomes in ``bucket``;
        made once for the many finishes of one instance."""
        found = self._instances.get((appid, bucket))
        if found is None:
            if len(self._instances) >= _INSTANCES_KEPT:
                self._instances.clear()
            keys = self.keys
            found = (keys.dead_letters_by_appid(appid), keys.outcomes(appid), keys.late_outcomes(appid, bucket))
            self._instances[appid, bucket] = found
        return found

    async def _chain_keys(self, items: Sequence[Finish]) -> dict[str, str]:
        """Each item's service-event chain key, for the finish's KEYS (touched only for a service event).

        Known from the claim, or the instance's; a claim this queue did not make, of an item
        without its appid (a drop), costs a read of the delivery's appid.
        """
        found = {item.delivery_id: self._chains.get(item.delivery_id) or self.keys.service_events(item.appid)
                 for item in items}  # fmt: skip
        unknown = [i.delivery_id for i in items if not i.appid and i.delivery_id not in self._chains]
        if unknown:
            async with self.redis.pipeline(transaction=False) as pipe:
                for delivery_id in unknown:
                    pipe.hget(self.keys.delivery(delivery_id), "appid")
                appids = await pipe.execute()
            for delivery_id, appid in zip(unknown, appids, strict=True):
                found[delivery_id] = self.keys.service_events(_text(appid or b""))
        return found

    async def release(self, ids: Sequence[str]) -> int:
        """Hand claimed jobs back to the front of the queue (shutdown)."""
        if not ids:
            return 0
        jobs = [self.keys.rq.job(delivery_id) for delivery_id in ids]
        answer = await self._release(keys=[self.inflight_key, self.queue_key, *jobs], args=list(ids))
        for delivery_id in ids:
            self._chains.pop(delivery_id, None)
        return int(cast(int, answer))

    async def pending(self) -> bool:
        """Whether anything is queued, claimed or scheduled."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.queue_key)
            pipe.zcard(self.inflight_key)
            pipe.zcard(self.scheduled_key)
            counts = await pipe.execute()
        return any(int(c) for c in counts)
