"""Breakers in a worker process: fewer attempts in flight to origins whose attempts time out.

The rule and its record in Redis are :mod:`svcgw.delivery.breaker`'s: an origin (a callback
address's origin) whose attempts time out is allowed fewer attempts in flight than its caps,
down to a few trial attempts, and more again as it answers. This is the worker's side of it, shared by
the engines of one process as its caps are (:mod:`worker.concurrencycaps`). An origin here is
always one account's (its record's name, :func:`svcgw.delivery.breaker.name`): the attempts
counted, the limit and the jobs held back are that account's alone, so another account's jobs to
the same origin are never counted, limited, held back or parked for it.

* each engine reads its shard's records every :data:`READ_EVERY` seconds, and at once after a
  finish that changed one (:meth:`Breakers.update`); an origin's limit is that of the record
  that changed last on any shard (:func:`svcgw.delivery.breaker.combine`);
* the attempts in flight to every origin are counted, tripped or not, so that an origin
  that begins to be tripped with its caps in flight starts no attempt until fewer than its limit
  are left (:meth:`Breakers.acquire`);
* the claim holds back the jobs of an origin at its limit, by the account and the URL
  spellings (netlocs) its attempts used (``<account> <netloc>``), as it does for a full socket
  (:meth:`Breakers.saturated`, :mod:`svcgw.delivery.claim`). While its attempts time out, those jobs are lined up over
  :data:`svcgw.delivery.breaker.PARK_SECONDS` and noted in its parked set; when it answers again
  (its record's last word is no longer a timeout), every engine of the process brings them
  forward on its shard (:meth:`Breakers.unparking`). While it answers below its caps, they wait a
  moment only;
* an attempt tells the finish script what it says of its origin (:meth:`Breakers.mark`):
  a timeout always, an answer only while the origin is held tripped, so an attempt to a
  healthy origin costs Redis nothing more.

Pure and in memory, but for the clock: nothing here does I/O.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping

from svcgw.delivery.breaker import PARK_SECONDS, BreakerRecord, combine
from svcgw.delivery.claim import Hold
from svcgw.storage.keys import KeySpace

__all__ = ["ANSWERING_WAIT", "READ_EVERY", "Breakers"]

READ_EVERY = 0.5  # seconds between reads of a shard's records
ANSWERING_WAIT = 0.05  # the shortest wait of a job held back for an origin answering below its caps
# Spellings remembered per process before the memory starts afresh (a few MB at most).
_NETLOCS_KEPT = 100_000


class Breakers:
    """The origins tripped, as the shards' records say, and this process's attempts in flight to each."""

    def __init__(self, cap: int, timeout: float, *, clock: Callable[[], float] = time.time) -> None:
        self.cap = cap
        self.timeout = timeout
        self.clock = clock
        self._records: dict[Hashable, Mapping[str, BreakerRecord]] = {}
        self._combined: dict[str, BreakerRecord] = {}
        self._inflight: Counter[str] = Counter()
        # origin -> the names the claim holds its jobs back by: its account and each netloc its attempts used
        self._netlocs: dict[str, set[str]] = {}
        self._known: set[str] = set()  # every name in _netlocs
        self._unpark: dict[Hashable, set[str]] = {}  # shard -> origins whose held-back jobs come forward

    # --- the shards' records -----------------------------------------------------------
    def join(self, shard: Hashable) -> None:
        """An engine of ``shard`` (its key space) reads and unparks there."""
        self._records.setdefault(shard, {})
        self._unpark.setdefault(shard, set())

    def update(self, shard: Hashable, records: Mapping[str, BreakerRecord]) -> None:
        """``shard``'s records as just read; an origin that stopped timing out is unparked on every shard."""
        self.join(shard)
        self._records[shard] = records
        before = self._combined
        names = {name for each in self._records.values() for name in each}
        self._combined = {}
        for name in names:
            record = combine(each[name] for each in self._records.values() if name in each)
            if record is not None:
                self._combined[name] = record
        for name, was in before.items():
            now = self._combined.get(name)
            if was.hanging and (now is None or not now.hanging):
                self.reopened(name)

    def reopened(self, destination: str) -> None:
        """``destination`` answered after timeouts: every engine brings its held-back jobs forward."""
        for pending in self._unpark.values():
            pending.add(destination)

    def unparking(self, shard: Hashable) -> list[str]:
        """The origins whose held-back jobs ``shard``'s engine is to bring forward now (each given once)."""
        pending = self._unpark.get(shard)
        if not pending:
            return []
        found = sorted(pending)
        pending.clear()
        return found

    def record(self, destination: str) -> BreakerRecord | None:
        """The record that counts for ``destination``, when it is tripped."""
        found = self._combined.get(destination)
        return found if found is not None and found.tripped else None

    def limit(self, destination: str) -> int | None:
        """The attempts in flight ``destination`` is allowed in this process; None while it has its caps."""
        found = self.record(destination)
        return None if found is None else max(1, min(found.limit, self.cap))

    def tripped(self) -> dict[str, BreakerRecord]:
        """Every origin tripped."""
        return {name: r for name, r in self._combined.items() if r.tripped}

    # --- attempts ------------------------------------------------------------------------
    def acquire(self, destination: str, netloc: str) -> bool:
        """Count an attempt to ``destination`` (a record's name), unless it is at its limit; ``netloc`` is what
        the claim holds the origin's jobs back by (the account and the URL's netloc,
        ``svcgw.delivery.claim.held_as``)."""
        if not destination:
            return True
        limit = self.limit(destination)
        if limit is not None and self._inflight[destination] >= limit:
            return False
        self._inflight[destination] += 1
        if netloc not in self._known:
            if len(self._known) >= _NETLOCS_KEPT:
                self._netlocs.clear()
                self._known.clear()
            self._netlocs.setdefault(destination, set()).add(netloc)
            self._known.add(netloc)
        return True

    def release(self, destination: str) -> None:
        if not destination:
            return
        self._inflight[destination] -= 1
        if self._inflight[destination] <= 0:
            del self._inflight[destination]

    def mark(self, destination: str, *, timed_out: bool, started: float) -> str:
        """What the attempt tells the finish script: ``t:<start>`` a timeout, ``a`` an answer while tripped, or ''."""
        if not destination:
            return ""
        if timed_out:
            return f"t:{started!r}"
        return "a" if self.record(destination) is not None else ""

    # --- jobs held back ------------------------------------------------------------------
    def defer_delay(self, destination: str) -> float:
        """How long a job the engine finds over ``destination``'s limit waits before it is claimed again.

        While its attempts time out, about as long as the trial attempt in flight may still take (the
        claim lines the next ones up further); while it answers below its caps, a moment.
        """
        found = self.record(destination)
        if found is not None and found.hanging:
            return self.timeout * random.uniform(0.5, 1.0)
        return ANSWERING_WAIT * random.uniform(1.0, 3.0)

    def saturated(self, keys: KeySpace) -> dict[str, Hold]:
        """The names the claim holds back by (account and netloc) of the origins at their limit, with when
        their jobs are due (their shard's ``keys``)."""
        held: dict[str, Hold] = {}
        now = self.clock()
        for name, found in self._combined.items():
            if not found.tripped or self._inflight.get(name, 0) < max(1, min(found.limit, self.cap)):
                continue
            if found.hanging:
                hold = Hold(now + self.timeout / 2 * random.uniform(0.8, 1.2), PARK_SECONDS, keys.parked(name))
            else:
                hold = Hold(now + ANSWERING_WAIT, 2 * ANSWERING_WAIT)
            for netloc in self._netlocs.get(name, ()):
                held[netloc] = hold
        return held
