"""The concurrency caps: how many attempts run against each socket and account at once, and how long they take.

One failing socket must not take every slot of a worker: at most
``cap`` attempts (``SVCGW_DESTINATION_CONCURRENCY``) of one account run
against one socket at once. The engine keys its slots by the sockets
a URL reaches (:mod:`worker.sockets`), and an attempt takes a slot on each
of them at once (:meth:`SocketSlots.acquire_all`), so every spelling of a
host shares its cap. It holds two :class:`SocketSlots`: one keyed by
account and socket, each account's own cap, so that an account whose
endpoints on a host many accounts use hang or answer slowly fills its own
slots only; and one keyed by socket alone, the host's ceiling across accounts
(``SVCGW_HOST_CONCURRENCY``, larger than one account's cap), which protects
the receiving host. :class:`AccountSlots` counts attempts per account
(``SVCGW_ACCOUNT_CONCURRENCY``), a cap that bites only while another
account wants slots of the same worker.

A job whose key is at its cap waits in the worker for a slot of it while the
key answers quickly (:meth:`SocketSlots.may_wait`): a burst of one
socket's jobs in one claim (its retries falling due together, or its
backlog brought forward) then costs no round trip per job. Otherwise, or when
the key's line in the worker is long, the job is deferred for about as long as
the key takes to free a slot (:meth:`SocketSlots.defer_delay`), and the
jobs of one claim found over the cap wait in line in the retry schedule, one
per slot the key frees at its usual pace, rather than all coming back at once.
The counts are this worker's own, in memory; nothing here does I/O.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BORROW_SECONDS",
    "CONTENDED_SECONDS",
    "DEFER_SECONDS",
    "LINE_QUICK",
    "LINE_ROUNDS",
    "LINE_WAIT",
    "AccountSlots",
    "SocketSlots",
]

DEFER_SECONDS = 0.25  # the shortest deferral of a job whose host is at its cap
# A host whose attempts answer within this long (the usual time, and its oldest attempt's age so far)
# lines the jobs over its cap up in the worker, each waiting at most LINE_WAIT for a slot, up to
# LINE_ROUNDS times its cap in line.
LINE_QUICK = 0.25
LINE_WAIT = 0.5
LINE_ROUNDS = 8
# An account alone may go over its cap while its attempts free their slots within this long
# (or half the delivery timeout, if shorter), so the slots it borrowed come back soon.
BORROW_SECONDS = 1.0
# Another account whose job this worker took up within this long still wants slots.
CONTENDED_SECONDS = 1.0


@dataclass
class _Round:
    """The jobs of one key found over its cap within one wait: they line up behind each other."""

    start: float
    wait: float  # how long the first in line waits; a job found over the cap after that starts a new round
    deferred: int = 0  # jobs in line so far


class SocketSlots:
    """Counts attempts in flight per socket, and how long the host behind it takes to answer."""

    # Whether a key keeps its usual answer time once its last attempt ends (else forgotten with it).
    keeps_typical = False

    def __init__(
        self,
        cap: int,
        timeout: float,
        *,
        shortest: float = DEFER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cap = cap
        self.timeout = timeout
        self.clock = clock
        self.shortest = shortest  # the first deferral while a key is at its cap
        # A plain dict, not a Counter: every attempt adds and removes its keys, and Counter's are Python methods.
        self._counts: dict[str, int] = {}
        self._started: dict[str, dict[int, float]] = {}
        self._typical: dict[str, float] = {}  # moving average of attempt durations
        self._deferred: Counter[str] = Counter()  # rounds of deferrals since a slot last freed
        self._rounds: dict[str, _Round] = {}
        self._tokens = 0
        self._waiting: Counter[str] = Counter()  # jobs waiting in the worker for a slot, per host

    def acquire(self, host: str) -> int | None:
        """A token for a slot on ``host``, or None when its cap is reached."""
        return self.acquire_all((host,))

    def acquire_all(self, hosts: Sequence[str]) -> int | None:
        """One token for a slot on every one of ``hosts``, or None (and no slot taken) when one is at its cap."""
        counts, cap = self._counts, self.cap
        for host in hosts:
            if counts.get(host, 0) >= cap:
                return None
        return self._take(hosts)

    def _take(self, hosts: Sequence[str], now: float | None = None) -> int:
        self._tokens = token = self._tokens + 1
        if now is None:
            now = self.clock()
        counts, started = self._counts, self._started
        for host in hosts:
            counts[host] = counts.get(host, 0) + 1
            of_host = started.get(host)
            if of_host is None:
                of_host = started[host] = {}
            of_host[token] = now
        return token

    def release_all(self, hosts: Sequence[str], token: int) -> None:
        now = self.clock()  # once for all of them: every attempt frees one to a few
        for host in hosts:
            self.release(host, token, now)

    def full(self, hosts: Sequence[str]) -> list[str]:
        """Those of ``hosts`` at their cap."""
        return [host for host in hosts if self._counts.get(host, 0) >= self.cap]

    def give_back(self, host: str, token: int) -> None:
        """Free a slot taken for no attempt (another cap refused the job): its time says nothing of ``host``."""
        self._started.get(host, {}).pop(token, None)
        self.release(host, token)

    def release(self, host: str, token: int, now: float | None = None) -> None:
        # Every attempt frees one to a few: no empty dict made for a host not started, no lookup repeated.
        if self._deferred:
            self._deferred.pop(host, None)
        counts = self._counts
        left = counts.get(host, 0) - 1
        if left <= 0 and not self.keeps_typical:
            self._forget(host)  # its times go with it: nothing to update first
            return
        of_host = self._started.get(host)
        started = of_host.pop(token, None) if of_host is not None else None
        if started is not None:
            took = (self.clock() if now is None else now) - started
            typical = self._typical
            before = typical.get(host)
            typical[host] = took if before is None else 0.8 * before + 0.2 * took
        if left <= 0:
            self._forget(host)
        else:
            counts[host] = left

    def _forget(self, host: str) -> None:
        """Forget an idle host, or a long-running worker would remember every host it ever saw."""
        self._counts.pop(host, None)
        self._started.pop(host, None)
        self._typical.pop(host, None)
        self._rounds.pop(host, None)

    def may_wait(self, host: str) -> bool:
        """Whether a job over ``host``'s cap may wait in the worker for a slot: the host answers quickly, and its
        line is short."""
        if self._waiting[host] >= LINE_ROUNDS * self.cap:
            return False
        now = self.clock()
        oldest = min(self._started.get(host, {}).values(), default=now)
        return max(self._typical.get(host, 0.0), now - oldest) <= LINE_QUICK

    def waits(self, host: str, joined: bool) -> None:
        """A job joined (or left) ``host``'s line in the worker."""
        self._waiting[host] += 1 if joined else -1
        if self._waiting[host] <= 0:
            del self._waiting[host]

    def saturated(self) -> dict[str, float]:
        """Hosts with no free slot whose jobs may not wait in the worker, each with when they should be claimed
        again."""
        now = time.time()
        return {
            host: now + self.defer_delay(host, claim=True)
            for host, count in self._counts.items()
            if count >= self.cap and not self.may_wait(host)
        }

    def defer_delay(self, host: str, *, claim: bool = False) -> float:
        """How long a job over the cap waits before it is claimed again.

        The first job found over the cap waits about as long as the host takes
        to free a slot: its usual answer time, or how long its oldest attempt
        has been waiting. Each time the host is found at its cap again before
        any of its slots freed, the wait doubles (up to the delivery timeout),
        so the jobs of a host that hangs are not claimed and handed back a few
        times a second each, at the expense of every other socket. "Again"
        is each claim that finds the host saturated (``claim``: the claim
        script then hands back every job of the host it pops, with this wait),
        a job found over the cap after the last wait ran out, and any job found
        over the cap while an attempt has been in flight for longer than the
        last wait (the host is slower than that wait hoped).

        The other jobs the engine finds over the cap (a burst, such as a
        socket's retries falling due together in one claim, while its
        attempts are young) are one round: they line up behind the first, each
        one usual answer time / cap later, as the host frees its slots, rather
        than doubling the wait a hundred times over. A line longer than the
        delivery timeout is spread over it.
        """
        now = self.clock()
        line = self._rounds.get(host)
        oldest = min(self._started.get(host, {}).values(), default=now)
        # An attempt in flight for longer than the round's wait: the host is slower than hoped.
        overdue = line is not None and now - oldest > line.wait
        if line is None or claim or overdue or now >= line.start + line.wait:
            streak = self._deferred[host]
            self._deferred[host] += 1
            estimate = max(self._typical.get(host, 0.0), now - oldest, self.shortest * 2 ** min(streak, 16))
            line = self._rounds[host] = _Round(now, min(estimate, max(self.timeout, self.shortest)))
        place = line.deferred
        line.deferred += 1
        behind = place * self._pace(host)
        if behind > self.timeout:
            # A line longer than the delivery timeout is spread over it instead: should the host
            # recover, none of its jobs waits much longer than it would have for a slot.
            behind = self.timeout * random.random()
        due = line.start + line.wait * random.uniform(0.8, 1.2) + behind
        return max(due - now, 0.0)

    def _pace(self, host: str) -> float:
        """How often the host frees one of its slots, at its usual answer time (0 while not known)."""
        return self._typical.get(host, 0.0) / self.cap


class AccountSlots(SocketSlots):
    """Attempts in flight per account, under a cap that exists for fairness between accounts.

    The cap bites only while another account wants slots of this worker:
    one of its attempts is in flight, or one of its jobs was taken up
    within ``CONTENDED_SECONDS``. Alone, an account may use every slot
    (the engine's ``SVCGW_DELIVERY_CONCURRENCY``), so a single account's
    slow endpoints are not held to a fraction of the worker.

    Going over the cap borrows slots that another account may want the next
    moment, so only an account whose attempts free their slots quickly may
    borrow: its usual answer time, and the age of its oldest attempt in
    flight, within ``BORROW_SECONDS`` (or half the delivery timeout). An
    account whose endpoints hang therefore stays at its cap even alone, and
    the slots it would otherwise hold until the timeout stay free for the
    next account that turns up.
    """

    def __init__(self, cap: int, timeout: float, *, borrow: float = BORROW_SECONDS, **options: Any) -> None:
        """``options`` are :class:`SocketSlots`'s; ``borrow`` stands for ``BORROW_SECONDS``."""
        super().__init__(cap, timeout, **options)
        self.quick = min(borrow, timeout / 2)
        self._seen: dict[str, float] = {}  # when a job of each account was last taken up
        self._pruned = self.clock()

    def acquire(self, host: str) -> int | None:
        """A token for a slot of account ``host``: under its cap, or over it while it may borrow."""
        now = self._seen[host] = self.clock()
        if now - self._pruned > CONTENDED_SECONDS:
            self._prune(now)
        if self._counts.get(host, 0) >= self.cap and not self.may_borrow(host):
            return None
        return self._take((host,), now)

    def may_borrow(self, account: str) -> bool:
        """Whether ``account`` may go over its cap now: it is alone and its attempts are quick."""
        now = self.clock()
        typical = self._typical.get(account)
        if typical is None or self._contended(account, now):
            return False
        oldest = min(self._started.get(account, {}).values(), default=now)
        return max(typical, now - oldest) <= self.quick

    def saturated(self) -> dict[str, float]:
        """Accounts at their cap that may not borrow, each with when its jobs should be claimed again."""
        now = time.time()
        return {
            account: now + self.defer_delay(account, claim=True)
            for account, count in self._counts.items()
            if count >= self.cap and not self.may_borrow(account)
        }

    def defer_delay(self, host: str, *, claim: bool = False) -> float:
        """How long a job of account ``host`` over its cap waits before it is claimed again.

        An account alone whose first attempts have not answered yet may be
        about to borrow: its jobs are looked at again about when its oldest
        attempt could answer, rather than after waits that double.
        """
        now = self.clock()
        if host not in self._typical and not self._contended(host, now):
            age = now - min(self._started.get(host, {}).values(), default=now)
            if age <= self.quick:
                return float(max(self.shortest, age) * random.uniform(0.8, 1.2))
        return super().defer_delay(host, claim=claim)

    def _contended(self, account: str, now: float) -> bool:
        """Whether another account has an attempt in flight or had a job taken up lately."""
        if any(other != account for other in self._counts):
            return True
        cutoff = now - CONTENDED_SECONDS
        return any(seen >= cutoff for other, seen in self._seen.items() if other != account)

    keeps_typical = True

    def _forget(self, host: str) -> None:
        # Its attempts all finished at once (they often do): keep how long they take, so that
        # its next ones may borrow at once. Accounts not seen lately are forgotten by _prune.
        self._counts.pop(host, None)
        self._started.pop(host, None)
        self._rounds.pop(host, None)

    def _prune(self, now: float) -> None:
        """Forget accounts neither in flight nor seen lately, or a worker would remember every account."""
        cutoff = now - CONTENDED_SECONDS
        self._seen = {account: seen for account, seen in self._seen.items() if seen >= cutoff}
        self._typical = {a: took for a, took in self._typical.items() if a in self._seen or a in self._counts}
        self._pruned = now
