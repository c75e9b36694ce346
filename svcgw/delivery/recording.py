"""Attempts' outcomes stored in Redis: what comes next for each, recorded with others in one script call.

:meth:`Outcomes.record` decides an attempt's next step with the retry
policy (:func:`svcgw.delivery.attempt.decide`), writes its log line and the one
record of a destination that started failing or recovered, or whose probing
began or ended (:mod:`svcgw.delivery.probing`), and tells the ``on_attempt``
hook, once the outcome is stored. :meth:`Outcomes.finish`
queues any end of a claim (also a drop or a deferral) and waits until it
is stored: :meth:`Outcomes.run` stores all that are waiting in one call of
the finish script (:meth:`svcgw.delivery.queue.DeliveryQueue.finish_detailed`),
and keeps trying while Redis is away (the claims stay held meanwhile).
Whatever a call raises, the batch is tried again: were the task to end, every
attempt waiting on it would wait for ever while the engine went on extending
its lease (a stranded delivery: :class:`worker.stranded.Stranded`).
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
from svcgw.delivery import failingdestinations, probing
from svcgw.delivery.view import stored_ids
from svcgw.errors import STORAGE_ERRORS
from svcgw.storage.rqformat import dashboard_text, exc_info_field, failed_score, failure_result, job_description

from .attempt import Attempt, Prepared, decide
from .queue import DeliveryQueue, Finish, Finished

__all__ = ["FINISH_BATCH", "AttemptHook", "Outcomes"]

log = logging.getLogger("svcgw.delivery")

FINISH_BATCH = 500

AttemptHook = Callable[[Prepared, Attempt, str], None]


@dataclass
class _Pending:
    item: Finish
    done: asyncio.Future[Finished]


class Outcomes:
    """The outcomes of one engine's attempts, on its queue; :meth:`run` is a task of its loop."""

    def __init__(self, settings: Settings, queue: DeliveryQueue, on_attempt: AttemptHook | None) -> None:
        self.settings = settings
        self.queue = queue
        self.on_attempt = on_attempt
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
        """Drop the ends of ``ids`` not sent yet: their claims were handed back (their waiters are cancelled)."""
        kept = []
        for pending in self._pending:
            if pending.item.delivery_id in ids:
                pending.done.cancel()
            else:
                kept.append(pending)
        self._pending[:] = kept

    async def record(self, prepared: Prepared, attempt: Attempt, probe: str = "") -> Finished:
        """Store the attempt's outcome and what comes next, then tell the ``on_attempt`` hook.

        ``probe`` is what the attempt tells of its destination's probing (:attr:`svcgw.delivery.queue.Finish.probe`).
        """
        delivery_id = prepared.delivery_id
        step, delay = decide(prepared, attempt, self.settings.retry_schedule)
        number = prepared.attempts + 1
        if step == "dead":
            due: float | None = failed_score(time.time(), self.settings.dead_letter_retention)
            retention = self.settings.dead_letter_retention
        else:
            due = time.time() + delay if delay is not None else None
            retention = max(self.settings.log_retention, 86400)
        destination = failingdestinations.destination_of(prepared.destination.url) if prepared.destination else ""
        why = why_dead(delivery_id, number, attempt) if step == "dead" else ""
        finished = await self.finish(
            Finish(
                delivery_id,
                prepared.appid,
                step,
                attempt.record(number),
                due=due,
                retention=retention,
                error=exc_info_field(why) if why else b"",
                shown=dead_letter_shown(prepared, why) if why else b"",
                failing=failingdestinations.name(prepared.account, destination),
                event_ids=stored_ids(prepared.body) if step == "delivered" and _keeps_ids(prepared) else b"",
                probe=probe,
                probing=probing.name(prepared.account, destination),
            )
        )
        _log_failing(destination, prepared.account, finished, attempt)
        _log_probing(destination, prepared.account, finished, attempt)
        log.info(
            "delivery attempt",
            extra={
                "appid": prepared.appid,
                "delivery_id": delivery_id,
                **({"destination_id": prepared.destination_id} if prepared.destination_id else {}),
                "attempt": number,
                "outcome": step,
                "status": attempt.status,
                "error": attempt.error,
                "duration_ms": round(attempt.duration * 1000, 1),
            },
        )
        if self.on_attempt is not None:
            try:
                self.on_attempt(prepared, attempt, step)
            except Exception:
                log.exception("delivery %s: the on_attempt hook failed", delivery_id)
        return finished

    async def finish(self, item: Finish) -> Finished:
        """Queue ``item`` for the next batch and wait until it is stored (``held`` False: the claim was lost)."""
        done: asyncio.Future[Finished] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(item, done))
        self._wanted.set()
        return await done

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
                    self._pending[:0] = [p for p in batch if not p.done.done()]
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
                for pending, held in zip(batch, results, strict=True):
                    if not pending.done.done():
                        pending.done.set_result(held)


def _keeps_ids(prepared: Prepared) -> bool:
    """Whether a delivered delivery's event ids are stored: a ``dlv_`` one keeps them in place of its body, and
    the bare outcome of one named by its post keeps them only when its post had duplicates (queue_finish.lua)."""
    return prepared.duplicates or deliveryid.parse_named(prepared.delivery_id) is None


def _log_failing(destination: str, account: str, finished: Finished, attempt: Attempt) -> None:
    """The one record of an account's destination that started failing or recovered
    (svcgw.delivery.failingdestinations), whatever the workers."""
    if finished.started_failing:
        log.warning(
            "destination failing",
            extra={"destination": destination, "account": account, "status": attempt.status, "error": attempt.error},
        )
    if finished.recovered:
        log.info("destination recovered",
                 extra={"destination": destination, "account": account, "status": attempt.status})  # fmt: skip


def _log_probing(destination: str, account: str, finished: Finished, attempt: Attempt) -> None:
    """The one record of each change of an account's destination's probing (svcgw.delivery.probing), whatever
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
