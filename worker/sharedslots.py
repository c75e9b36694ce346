"""One worker's delivery slots shared by the engines of a Redis Cluster's virtual shards.

A worker runs one engine per shard (:mod:`worker.main`); on a Cluster, one per virtual shard, 16
by default. Each engine has ``SVCGW_DELIVERY_CONCURRENCY`` slots of its own, so a Cluster's worker
claimed up to sixteen times what one Redis's claims: a backlog was taken up all at once, far more
jobs than the caps per destination and per account let start, and the rest went back to the
scheduled registry unstarted (a deferral: a finish, a promotion and a claim and read again each),
round after round. Every job of a drain cost several claims, reads and finishes.

On a Cluster the engines of a process share :class:`SharedSlots` instead: the worker holds
``SVCGW_DELIVERY_CONCURRENCY`` claims at most, whatever its virtual shards, as on one Redis. An
engine reserves the slots it asks its claim for before sending it (the event loop runs one engine
at a time, so two cannot reserve the same slots), keeps those its claim started and gives back the
rest; a started attempt frees its slot when its task ends, however it ends.

No virtual shard waits for ever behind the others: an engine that finds too little room joins a
line, and while engines wait in it an engine outside may not claim the little there is; it joins
the line's end. When room comes back (:attr:`low` slots or more), every engine in the line is
woken, the longest-waiting first, so the virtual shards take turns under a backlog. Any engine
may then claim, so one whose master is failing over holds up no other.

A worker starting on a backlog ramps up (``ramp``): until one of its attempts has ended it holds
:attr:`low` claims at most. Sixteen engines claiming at once would otherwise take up the whole
worker's slots before any attempt answered, while an account's cap (``SVCGW_ACCOUNT_CONCURRENCY``)
holds it back until its attempts are seen to answer quickly (:class:`worker.concurrencycaps.AccountSlots`):
most of those jobs went back unstarted. One engine on one Redis ramps up by itself, claiming a batch
at a time while the first ones answer.

One Redis and plain shards use it as a private pool per engine, which changes nothing there: each
of their engines keeps its own slots and claims as before.

Pure and in memory; each engine is known by its ``asyncio.Event`` (set: it may look again).
"""

from __future__ import annotations

import asyncio

__all__ = ["SharedSlots"]


class SharedSlots:
    """``total`` slots for the engines that share it; those waiting in line woken once ``low`` are free.

    An engine is known by itself (any object); the event it waits on is set when it may look again.
    """

    def __init__(self, total: int, low: int, *, ramp: bool = False) -> None:
        self.total = total
        self.low = max(1, min(low, total))
        self._warm = not ramp  # an attempt has ended: every slot may be claimed
        self.running = 0  # started attempts not ended yet
        self._reserved: dict[object, int] = {}  # each engine's claim under way
        self._line: dict[object, asyncio.Event] = {}  # engines waiting for room, longest-waiting first

    @property
    def free(self) -> int:
        return (self.total if self._warm else self.low) - self.running - sum(self._reserved.values())

    def room(self, engine: object, wake: asyncio.Event, own: int) -> int:
        """How many jobs ``engine`` may claim now, ``own`` its own free slots.

        With :attr:`low` slots free or more, any engine may claim, and those of the line are woken to. With
        fewer, an engine outside the line while others wait in it may claim none; it joins the line (one in
        it keeps its place), ``wake`` to be set when there is room again.
        """
        free = max(self.free, 0)
        if free >= self.low:
            self._wake()  # none of the line sleeps while there is room
            return min(own, free)
        if self._line and engine not in self._line:
            free = 0
        self._line[engine] = wake  # a key already there keeps its place
        return min(own, free)

    def reserve(self, engine: object, count: int) -> int:
        """``engine`` claims up to ``count`` jobs: their slots are its own until :meth:`settle`. Returns ``count``.

        A reservation left by a claim that failed is replaced by the engine's next one, so none leaks.
        """
        self._line.pop(engine, None)
        self._reserved[engine] = count
        return count

    def settle(self, engine: object, started: int) -> None:
        """``engine``'s claim started ``started`` jobs: those keep their slots, the rest are free again."""
        self._reserved.pop(engine, None)
        self.running += started
        self._wake()

    def ended(self, _task: object = None) -> None:
        """A started attempt ended (a done callback of its task): its slot is free."""
        self.running -= 1
        self._warm = True
        self._wake()

    def leave(self, engine: object) -> None:
        """``engine`` stopped: out of the line, its reservation given back."""
        self._line.pop(engine, None)
        self._reserved.pop(engine, None)
        self._wake()

    def waiting(self) -> int:
        return len(self._line)

    def _wake(self) -> None:
        if self._line and self.free >= self.low:
            for wake in self._line.values():
                wake.set()
