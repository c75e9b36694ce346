"""The slots an attempt takes before it is sent, and what the claim holds back by them.

One failing socket cannot take every slot: at most
``SVCGW_DESTINATION_CONCURRENCY`` attempts of one account run against one
socket at once (:class:`worker.concurrencycaps.SocketSlots`). A socket is what a
URL reaches, whatever the URL's spelling of the host: its resolved addresses
and port (:mod:`worker.sockets`). The cap is each account's own, as is the
breaker below: many accounts' endpoints live on one host (a chat tool's incoming
webhooks, an automation platform), and one account whose paths there hang or
answer slowly must not hold the slots the others' deliveries to that host need.
Every account's attempts to one socket together stay under a ceiling
(``SVCGW_HOST_CONCURRENCY``, by default four accounts' caps) that protects the
receiving host and that one account alone cannot fill. Nor can one account: at most
``SVCGW_ACCOUNT_CONCURRENCY`` of its attempts run at once while another
account wants slots; alone, an account whose endpoints answer quickly may
use every slot (:class:`worker.concurrencycaps.AccountSlots`). Nor can one
origin whose attempts time out: its breaker trips, and it is allowed fewer attempts
in flight while they time out and more as it answers (:mod:`worker.breaker`,
:mod:`svcgw.delivery.breaker`). A job over a socket's cap waits in the
worker for one of its slots while that socket answers quickly
(:meth:`worker.concurrencycaps.SocketSlots.may_wait`): a burst of one
socket's jobs costs no round trip per job. Otherwise a job whose
socket or account is at its cap, or whose origin is at its breaker's
limit, goes back to the scheduled registry without counting an
attempt, for longer the slower that socket has been answering
(:meth:`Gate.take` answers the delay). The claim does that itself for the
sockets (as the URL spellings seen lately that reach them) and accounts
:meth:`Gate.saturated` names, so such a job usually costs no round trip of its
own.

The engines of one worker process share one gate: the caps are the process's.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from svcgw.config.settings import Settings
from svcgw.delivery import breaker, failingorigins
from svcgw.delivery.attempt import Prepared
from svcgw.delivery.claim import Hold, held_as
from svcgw.storage.keys import KeySpace

from .breaker import Breakers
from .concurrencycaps import LINE_WAIT, AccountSlots, SocketSlots
from .sockets import SocketKeys, netloc_of

__all__ = ["ACCOUNT_DEFER_SECONDS", "Gate", "Held", "lane"]

ACCOUNT_DEFER_SECONDS = 0.05  # the shortest deferral of a job whose account is at its cap
_ROUTES_KEPT = 4096  # (account, address) pairs whose names are remembered


def lane(account: str, key: str) -> str:
    """The slot key of ``account``'s attempts to the destination key ``key`` (an address and port)."""
    return f"{account} {key}"


@dataclass(slots=True)
class Held:
    """The slots one attempt holds: its account's on each key of its destination, the host's ceiling on each,
    and its account's."""

    lanes: tuple[str, ...]  # lane(account, key) of each key of its destination
    token: int | None
    destinations: tuple[str, ...]  # the keys themselves, under the ceiling across accounts
    host_token: int | None
    account: str
    account_token: int | None
    # Its account's destination, as its probing counts it (svcgw.delivery.breaker.name); '' for none
    origin: str


@dataclass(slots=True)
class _Route:
    """What an account's address is named by in the slots: the same for every attempt of it, so made once."""

    keys: tuple[str, ...]  # its destination keys when these names were made
    lanes: tuple[str, ...]
    origin: str  # svcgw.delivery.breaker.name
    held: str  # held_as(account, netloc)


class Gate:
    """The slots of one worker process's attempts: per account and destination, per host, per account, and the
    probing of destinations whose attempts time out."""

    def __init__(self, settings: Settings) -> None:
        # Per account and destination key (lane): one account's slow or hanging endpoints on a host fill their own.
        self.slots = SocketSlots(settings.destination_concurrency, settings.delivery_timeout)
        # Per destination key, every account's together: the receiving host's ceiling.
        self.hosts = SocketSlots(settings.host_ceiling, settings.delivery_timeout)
        # An account at its cap is usually busy rather than stuck: its deliveries
        # free slots within milliseconds, so its waits start short.
        self.accounts = AccountSlots(
            settings.account_concurrency, settings.delivery_timeout, shortest=ACCOUNT_DEFER_SECONDS
        )
        self.sockets = SocketKeys(settings.allow_private_destinations, settings.destination_ports)
        # Destinations whose attempts time out get fewer attempts in flight (svcgw.delivery.breaker).
        self.breakers = Breakers(settings.destination_concurrency, settings.delivery_timeout)
        # Jobs over a quick destination's cap waiting for one of its slots, per key, first first.
        self.lines: dict[str, deque[asyncio.Future[None]]] = {}
        self._routes: dict[tuple[str, str], _Route] = {}

    def saturated(self, keys: KeySpace) -> dict[str, Hold]:
        """What the claim holds jobs back by, with when to try again: an account and a URL spelling (netloc)
        seen lately that reaches its destination at that account's cap or probing limit
        (:func:`svcgw.delivery.claim.held_as`), or a netloc alone, for every account, at the host's ceiling."""
        held = self.breakers.saturated(keys)

        def hold(name: str, when: float) -> None:
            if name not in held or held[name].last < when:
                held[name] = Hold(when)

        for key, when in self.slots.saturated().items():
            account, _, address = key.partition(" ")
            for netloc in self.sockets.netlocs_of((address,)):
                hold(held_as(account, netloc), when)
        for key, when in self.hosts.saturated().items():
            for netloc in self.sockets.netlocs_of((key,)):
                hold(netloc, when)
        return held

    def _known_route(self, account: str, url: str) -> _Route | None:
        """The route of a known address whose keys have not changed: most attempts', without a coroutine."""
        route = self._routes.get((account, url))
        if route is None:
            return None
        destinations = self.sockets.cached(url) if url else ()
        return route if destinations is not None and route.keys == destinations else None

    async def _route(self, account: str, url: str) -> _Route:
        destinations = (self.sockets.cached(url) or await self.sockets.keys(url)) if url else ()
        route = self._routes.get((account, url))
        if route is None or route.keys != destinations:
            if len(self._routes) >= _ROUTES_KEPT:
                self._routes.clear()  # rare: a worker past this many addresses names each once more
            origin = breaker.name(account, failingorigins.origin_of(url))
            lanes = tuple(lane(account, key) for key in destinations)
            route = self._routes[account, url] = _Route(destinations, lanes, origin, held_as(account, netloc_of(url)))
        return route

    async def take(self, prepared: Prepared) -> Held | float:
        """Slots on the attempt's destination (its account's, and the host's ceiling) and account, within its
        probing limit; else, one being at its cap, in how many seconds the job is to be tried again."""
        url = prepared.destination.url if prepared.destination else ""
        account = prepared.account
        route = self._known_route(account, url) or await self._route(account, url)
        destinations, lanes, origin = route.keys, route.lanes, route.origin
        deadline = time.monotonic() + LINE_WAIT
        while True:
            account_token = self.accounts.acquire(account)
            if account_token is None:
                return self.accounts.defer_delay(account)
            if not self.breakers.acquire(origin, route.held):
                self.accounts.give_back(account, account_token)
                return self.breakers.defer_delay(origin)
            if not destinations:
                return Held((), None, (), None, account, account_token, origin)
            token = self.slots.acquire_all(lanes)
            host_token = self.hosts.acquire_all(destinations) if token is not None else None
            if host_token is not None:
                return Held(lanes, token, destinations, host_token, account, account_token, origin)
            if token is not None:
                for key in lanes:
                    self.slots.give_back(key, token)
            self.accounts.give_back(account, account_token)
            self.breakers.release(origin)
            full = [(self.slots, key) for key in self.slots.full(lanes)]
            full += [(self.hosts, key) for key in self.hosts.full(destinations)]
            # A quick destination frees a slot within moments: wait for it here rather than go round Redis.
            if not (all(slots.may_wait(key) for slots, key in full) and await self._wait_in_line(*full[0], deadline)):
                return max(slots.defer_delay(key) for slots, key in full)

    async def _wait_in_line(self, slots: SocketSlots, key: str, deadline: float) -> bool:
        """Wait until ``key`` (of ``slots``) frees a slot (True) or ``deadline`` passes (False), first come first
        served."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self.lines.setdefault(key, deque())
        line.append(waiter)
        slots.waits(key, True)
        try:
            await asyncio.wait_for(waiter, left)
            return True
        except TimeoutError:
            return False
        finally:
            slots.waits(key, False)
            if not waiter.done():
                waiter.cancel()
            try:
                line.remove(waiter)
            except ValueError:
                pass  # woken: it left the line then
            if not line and self.lines.get(key) is line:
                del self.lines[key]

    def _wake(self, keys: tuple[str, ...]) -> None:
        """A slot of each of ``keys`` was freed: the first job waiting for it may try again."""
        for key in keys:
            line = self.lines.get(key)
            while line:
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    break

    def free(self, held: Held) -> None:
        """The attempt holding ``held`` is over: its slots go to the next."""
        if held.token is not None:
            self.slots.release_all(held.lanes, held.token)
            if self.lines:
                self._wake(held.lanes)
        if held.host_token is not None:
            self.hosts.release_all(held.destinations, held.host_token)
            if self.lines:
                self._wake(held.destinations)
        if held.account_token is not None:
            self.accounts.release(held.account, held.account_token)
        self.breakers.release(held.origin)
