"""Slots: how many attempts run against each key at once, and how long its attempts take.

One failing destination must not take every slot of a worker: at most
``cap`` attempts (``SVCGW_DESTINATION_CONCURRENCY``) run against one
destination at once. The engine keys destinations by the sockets a URL
reaches (:mod:`worker.destinations`), and an attempt takes a slot on each of
them at once (:meth:`DestinationSlots.acquire_all`), so every spelling of a
host shares its cap. The same class counts attempts per account
(``SVCGW_ACCOUNT_CONCURRENCY``).

A job whose key is at its cap is deferred for about as long as the key takes
to free a slot (:meth:`DestinationSlots.defer_delay`). The counts are this
worker's own, in memory; nothing here does I/O.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence

__all__ = ["DEFER_SECONDS", "DestinationSlots"]

DEFER_SECONDS = 0.25  # the shortest deferral of a job whose host is at its cap


class DestinationSlots:
    """Counts attempts in flight per destination host, and how long that host takes to answer."""

    def __init__(self, cap: int, timeout: float, *, shortest: float = DEFER_SECONDS) -> None:
        self.cap = cap
        self.timeout = timeout
        self.shortest = shortest  # the first deferral while a key is at its cap
        self._counts: Counter[str] = Counter()
        self._started: dict[str, dict[int, float]] = {}
        self._typical: dict[str, float] = {}  # moving average of attempt durations
        self._deferred: Counter[str] = Counter()  # jobs deferred since a slot last freed
        self._tokens = 0

    def acquire(self, host: str) -> int | None:
        """A token for a slot on ``host``, or None when its cap is reached."""
        return self.acquire_all((host,))

    def acquire_all(self, hosts: Sequence[str]) -> int | None:
        """One token for a slot on every one of ``hosts``, or None (and no slot taken) when one is at its cap."""
        if any(self._counts[host] >= self.cap for host in hosts):
            return None
        self._tokens += 1
        now = time.monotonic()
        for host in hosts:
            self._counts[host] += 1
            self._started.setdefault(host, {})[self._tokens] = now
        return self._tokens

    def release_all(self, hosts: Sequence[str], token: int) -> None:
        for host in hosts:
            self.release(host, token)

    def full(self, hosts: Sequence[str]) -> list[str]:
        """Those of ``hosts`` at their cap."""
        return [host for host in hosts if self._counts.get(host, 0) >= self.cap]

    def release(self, host: str, token: int) -> None:
        started = self._started.get(host, {}).pop(token, None)
        if started is not None:
            took = time.monotonic() - started
            before = self._typical.get(host)
            self._typical[host] = took if before is None else 0.8 * before + 0.2 * took
        self._deferred.pop(host, None)
        self._counts[host] -= 1
        if self._counts[host] <= 0:
            # Forget idle hosts, or a long-running worker would remember every host it ever saw.
            del self._counts[host]
            self._started.pop(host, None)
            self._typical.pop(host, None)

    def saturated(self) -> dict[str, float]:
        """Hosts with no free slot, each with when its jobs should be claimed again."""
        now = time.time()
        return {host: now + self.defer_delay(host) for host, count in self._counts.items() if count >= self.cap}

    def defer_delay(self, host: str) -> float:
        """How long a job over the cap waits before it is claimed again.

        About as long as the host takes to free a slot: its usual answer time,
        or how long its oldest attempt has been waiting. Each time the host is
        found at its cap again before any of its slots freed, the wait doubles
        (up to the delivery timeout), so the jobs of a host that hangs are not
        claimed and handed back a few times a second each, at the expense of
        every other destination.
        """
        streak = self._deferred[host]
        self._deferred[host] += 1
        now = time.monotonic()
        oldest = min(self._started.get(host, {}).values(), default=now)
        estimate = max(self._typical.get(host, 0.0), now - oldest, self.shortest * 2 ** min(streak, 16))
        return float(min(estimate, max(self.timeout, self.shortest)) * random.uniform(0.8, 1.2))
