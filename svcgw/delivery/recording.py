"""Attempts' outcomes stored in Redis: what comes next for each, recorded with others in one script call.

:meth:`Outcomes.record` decides an attempt's next step with the retry
policy (:func:`svcgw.delivery.attempt.decide`) and queues it, without waiting:
the attempt's task ends there. :meth:`Outcomes.run` stores all that are
waiting in one call of the finish script
(:meth:`svcgw.delivery.queue.DeliveryQueue.finish_detailed`), and keeps trying while
Redis is away (the claims stay held meanwhile). Only once a batch is stored
does it, for each of its attempts, write the log line and the one record of
a destination that started failing or recovered, or whose probing began or
ended (:mod:`svcgw.delivery.breaker`), tell the ``on_attempt`` hook, and hand
the end of the claim to the engine (``ended``): a finish is in Redis before
it counts, and one batch costs one wake-up of this task, not one per attempt.
:meth:`Outcomes.finish` queues any other end of a claim (a drop or a
deferral) and waits until it is stored; :meth:`Outcomes.end` queues one
without waiting. Whatever a call raises, the batch is tried again: were the
task to end, every claim waiting on it would stay held for ever while the
engine went on extending its lease (a stranded delivery:
:class:`worker.stranded.Stranded`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import failingorigins
from svcgw.delivery.view import stored_ids
from svcgw.errors import STORAGE_ERRORS
from svcgw.logs import Line
from svcgw.storage.rqformat import dashboard_text, exc_info_field, failed_score, failure_result, job_description

from .attempt import Attempt, Prepared, decide
from .queue import DeliveryQueue, Finish, Finished

__all__ = ["FINISH_BATCH", "AttemptHook", "Outcomes"]

log = logging.getLogger("svcgw.delivery")
# The line of each attempt, its record made once (svcgw.logs.Line).
_attempt_line = Line(log, logging.INFO, "delivery attempt")

FINISH_BATCH = 500

AttemptHook = Callable[[Prepared, Attempt, str], None]
# Told, once a claim's end is stored: its delivery id, how storing went, and the origin its attempt went to
# (svcgw.delivery.breaker.name; '' for none).
Ended = Callable[[str, Finished, str], None]


@dataclass(slots=True)
class _Pending:
    """A claim's end waiting to be stored, and whom to tell once it is."""

    item: Finish
    done: asyncio.Future[Finished] | None = None  # awaited by :meth:`Outcomes.finish`
    # An attempt's: what its log line and hook are told once its outcome is stored.
    prepared: Prepared | None = None
    attempt: Attempt | None = None
    destination: str = ""
    origin: str = ""
    dropped: bool = False  # its claim was handed back: nobody is told

    @property
    def wanted(self) -> bool:
        return not self.dropped and (self.done is None or not self.done.done())


class Outcomes:
    """The outcomes of one engine's attempts, on its queue; :meth:`run` is a task of its loop."""

    def __init__(
        self, settings: Settings, queue: DeliveryQueue, on_attempt: AttemptHook | None, ended: Ended | None = None
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.on_attempt = on_attempt
        self.ended = ended
        # Read once: every attempt asks.
        self._schedule = settings.retry_schedule
        self._dead_retention = settings.dead_letter_retention
        self._retention = max(settings.log_retention, 86400)
        self._drained: asyncio.Event | None = None  # set once nothing is waiting (shutdown waits on it)
        self._pending: list[_Pending] = []
        self._wanted = asyncio.Event()
        self._storing: list[_Pending] = []  # the batch of the call under way
        # When the call under way began (monotonic), or None between calls.
        self.storing_since: float | None = None
        # The last call failed with an error that is not Redis's: trying again may never succeed.
        self.failing_unexpectedly = False

    @property
    def waiting(self) -> bool:
        """Whether an outcome is waiting to be stored."""
        return bool(self._pending)

    def waiting_ids(self) -> set[str]:
        """The deliveries whose end is waiting to be stored, or being stored now."""
        return {p.item.delivery_id for p in (*self._pending, *self._storing)}

    def stalled(self, now: float, longest: float) -> bool:
        """Whether storing is not merely waiting for Redis: a call failing with an error of another kind, or one
        under way for more than ``longest`` seconds at ``now`` (monotonic)."""
        since = self.storing_since
        return self.failing_unexpectedly or (since is not None and now - since > longest)

    def forget(self, ids: set[str]) -> None:
        """Drop the ends of ``ids`` not stored yet: their claims were handed back (their waiters are cancelled,
        nobody is told of them)."""
        kept = []
        for pending in self._pending:
            if pending.item.delivery_id in ids:
                pending.dropped = True
                if pending.done is not None:
                    pending.done.cancel()
            else:
                kept.append(pending)
        self._pending[:] = kept
        for pending in self._storing:
            if pending.item.delivery_id in ids:
                pending.dropped = True

    def record(self, prepared: Prepared, attempt: Attempt, probe: str = "", origin: str = "") -> None:
        """Queue the attempt's outcome and what comes next; once stored, its log lines, the ``on_attempt`` hook
        and ``ended``.

        ``probe`` is what the attempt tells of its destination's probing (:attr:`svcgw.delivery.queue.Finish.probe`),
        ``origin`` the probing name it went to (for ``ended``).
        """
        delivery_id = prepared.delivery_id
        step, delay = decide(prepared, attempt, self._schedule)
        number = prepared.attempts + 1
        if step == "dead":
            due: float | None = failed_score(time.time(), self._dead_retention)
            retention = self._dead_retention
        else:
            due = time.time() + delay if delay is not None else None
            retention = self._retention
        destination = failingorigins.origin_of(prepared.destination.url) if prepared.destination else ""
        why = why_dead(delivery_id, number, attempt) if step == "dead" else ""
        # Its failing and probing records are named alike, as the origin its slots were taken for.
        named = origin or failingorigins.name(prepared.account, destination)
        self._queue(_Pending(
            Finish(
                delivery_id,
                prepared.appid,
                step,
                attempt.record(number),
                due=due,
                retention=retention,
                error=exc_info_field(why) if why else b"",
                shown=dead_letter_shown(prepared, why) if why else b"",
                failing=named,
                event_ids=stored_ids(prepared.body) if step == "delivered" and _keeps_ids(prepared) else b"",
                probe=probe,
                probing=named,
            ),
            prepared=prepared, attempt=attempt, destination=destination, origin=origin,
        ))  # fmt: skip

    def _told(self, pending: _Pending, finished: Finished) -> None:
        """An attempt's outcome is stored: its log lines and the ``on_attempt`` hook."""
        prepared, attempt, destination = pending.prepared, pending.attempt, pending.destination
        assert prepared is not None and attempt is not None
        item = pending.item
        if finished.started_failing or finished.recovered:
            _log_failing(destination, prepared.account, finished, attempt)
        if finished.probe_began or finished.reopened or finished.probe_ended:
            _log_probing(destination, prepared.account, finished, attempt)
        extra: dict[str, object] = {"appid": item.appid, "delivery_id": item.delivery_id}
        if prepared.destination_id:
            extra["destination_id"] = prepared.destination_id
        extra["attempt"] = prepared.attempts + 1
        extra["outcome"] = item.kind
        extra["status"] = attempt.status
        extra["error"] = attempt.error
        extra["duration_ms"] = round(attempt.duration * 1000, 1)
        _attempt_line(extra)
        if self.on_attempt is not None:
            try:
                self.on_attempt(prepared, attempt, item.kind)
            except Exception:
                log.exception("delivery %s: the on_attempt hook failed", item.delivery_id)

    def end(self, item: Finish) -> None:
        """Queue ``item`` (a drop or a deferral) for the next batch, without waiting; ``ended`` is told once it is
        stored."""
        self._queue(_Pending(item))

    async def finish(self, item: Finish) -> Finished:
        """Queue ``item`` for the next batch and wait until it is stored (``held`` False: the claim was lost)."""
        done: asyncio.Future[Finished] = asyncio.get_running_loop().create_future()
        self._queue(_Pending(item, done))
        return await done

    def _queue(self, pending: _Pending) -> None:
        self._pending.append(pending)
        self._wanted.set()

    async def drained(self) -> None:
        """Wait until nothing is waiting to be stored, nor being stored."""
        while self._pending or self._storing:
            if self._drained is None:
                self._drained = asyncio.Event()
            await self._drained.wait()

    async def run(self) -> None:
        """Store finished attempts, all that are waiting in one script call."""
        failures = 0
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while self._pending:
                batch = self._pending[:FINISH_BATCH]
                del self._pending[:FINISH_BATCH]
                self._storing, self.storing_since = batch, time.monotonic()
                try:
                    results = await self.queue.finish_detailed([p.item for p in batch])
                except Exception as exc:
                    # Still claimed and still extended: try again until Redis is back.
                    self._pending[:0] = [p for p in batch if p.wanted]
                    failures += 1
                    delay = min(0.05 * 2**failures, 2.0)
                    self.failing_unexpectedly = not isinstance(exc, STORAGE_ERRORS)
                    if not self.failing_unexpectedly:
                        log.warning("could not record %d attempts (%s); retrying", len(batch), type(exc).__name__)
                    else:
                        log.exception("could not record %d attempts (%s); retrying", len(batch), type(exc).__name__)
                    await asyncio.sleep(delay)
                    continue
                finally:
                    self._storing, self.storing_since = [], None
                failures = 0
                self.failing_unexpectedly = False
                for pending, finished in zip(batch, results, strict=True):
                    if pending.wanted:
                        self._tell(pending, finished)
            if self._drained is not None:
                self._drained.set()
                self._drained = None

    def _tell(self, pending: _Pending, finished: Finished) -> None:
        """Whoever waits for a stored end; one who fails does not keep the others from being told."""
        if pending.done is not None:
            pending.done.set_result(finished)
            return
        try:
            if pending.attempt is not None:
                self._told(pending, finished)
        except Exception:
            log.exception("delivery %s: its stored outcome could not be logged", pending.item.delivery_id)
        if self.ended is not None:
            self.ended(pending.item.delivery_id, finished, pending.origin)


def _keeps_ids(prepared: Prepared) -> bool:
    """Whether a delivered delivery's event ids are stored: a ``dlv_`` one keeps them in place of its body, and
    the bare outcome of one named by its post keeps them only when its post had duplicates (queue_finish.lua)."""
    return prepared.duplicates or deliveryid.parse_named(prepared.delivery_id) is None


def _log_failing(destination: str, account: str, finished: Finished, attempt: Attempt) -> None:
    """The one record of an account's destination that started failing or recovered
    (svcgw.delivery.failingorigins), whatever the workers."""
    if finished.started_failing:
        log.warning(
            "destination failing",
            extra={"destination": destination, "account": account, "status": attempt.status, "error": attempt.error},
        )
    if finished.recovered:
        log.info("destination recovered",
                 extra={"destination": destination, "account": account, "status": attempt.status})  # fmt: skip


def _log_probing(destination: str, account: str, finished: Finished, attempt: Attempt) -> None:
    """The one record of each change of an account's destination's probing (svcgw.delivery.breaker), whatever
    the workers."""
    if finished.probe_began:
        log.warning("destination probed",
                    extra={"destination": destination, "account": account, "error": attempt.error})  # fmt: skip
    if finished.reopened:
        log.info("destination answers again",
                 extra={"destination": destination, "account": account, "status": attempt.status})  # fmt: skip
    if finished.probe_ended:
        log.info("destination back at its caps", extra={"destination": destination, "account": account})


def why_dead(delivery_id: str, number: int, attempt: Attempt) -> str:
    """A dead letter's error text (RQ's ``exc_info``): the delivery, its last attempt and that attempt's outcome.

    ``delivery we_...-0 died after attempt 7: HTTP 500 from http://host/hook`` (the address without
    credentials or query, as the attempt's record has it); a timeout or a refused address says so.
    """
    outcome = attempt.error or (f"HTTP {attempt.status}" if attempt.status is not None else "no outcome")
    address = f" from {attempt.destination}" if attempt.destination else ""
    return dashboard_text(f"delivery {delivery_id} died after attempt {number}: {outcome}{address}")


def dead_letter_shown(prepared: Prepared, why: str) -> bytes:
    """What rq-dashboard shows of a dead letter, for the finish script: its description and its failed run.

    rq-dashboard reads a failed job's ``exc_info`` from RQ's results stream only (``failure_result``),
    and the job hash of a delivery named by its post has no description until it dies (only a service
    event's is written at ingest).
    """
    description = job_description(prepared.event_type, prepared.appid, prepared.destination_id)
    return orjson.dumps({"d": description, "r": failure_result(why)})
