"""The HTTP server near its cap of connections: shed what costs most and gives least, shorten keep-alive.

A server process takes at most ``SVCGW_HTTP_LIMIT_CONCURRENCY`` connections;
at the cap, uvicorn answers every new request 503. Each address holds at
most its share of them (:mod:`receiver.server.addressshare`), yet a few addresses
together (nine at the default share, or one IPv6 line) can still hold them
all with idle keep-alive connections or bodies sent at the minimum rate,
and every other client would be refused. As nginx (``keepalive_timeout``,
``reset_timedout_connection``) and Envoy's overload manager do, the server
makes room before it refuses anyone:

* when a new connection takes the process past :meth:`Pressure.high_water`
  (the cap less a sixteenth), it closes enough others to come back down to
  :meth:`Pressure.low_water` (the cap less an eighth), chosen by
  :func:`shed_rank`: first the connections waiting idle for a request (a
  keep-alive connection between requests, or one that has sent nothing yet)
  for :data:`IDLE_GRACE` or longer, the longest idle first; then the
  requests still arriving, head or body, the slowest first (bytes a second
  since the request began), the oldest among equals; last the connections
  idle for less than that grace, which are a client's between two of its
  requests (closing one would meet the next request on its way). Requests
  being answered, and bodies the server itself is not reading (the app
  busy), are never chosen: that time is the server's. A body so closed is
  answered 503 with ``Retry-After: 1``.
* the keep-alive timeout shrinks as the connections fill the cap
  (:func:`keepalive_timeout`): ``SVCGW_HTTP_KEEPALIVE_TIMEOUT`` up to half of
  it, then in proportion to the room left, down to a tenth at the high water.

Pure but for the counts of one process (:class:`Pressure`): the protocol
(``receiver.server.httpprotocol``) asks it what to do and does it.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterable
from typing import TypeVar

__all__ = ["IDLE", "IDLE_GRACE", "MIN_CAP", "UNFINISHED", "Pressure", "keepalive_timeout", "pick", "shed_rank"]

log = logging.getLogger("svcgw")

T = TypeVar("T")

# Below this cap a sixteenth is under two connections: shedding would close one client for the next.
MIN_CAP = 32
# The shortest keep-alive at the high water, as a share of SVCGW_HTTP_KEEPALIVE_TIMEOUT.
KEEPALIVE_FLOOR = 0.1
# What a connection is doing, in the order connections are shed (an idle one within its grace last).
IDLE, UNFINISHED, JUST_IDLE = 0, 1, 2
# Seconds an idle connection is taken for a client's between two of its requests.
IDLE_GRACE = 0.5
# The log tells of shedding at most this often (seconds), with the counts since.
_TOLD_EVERY = 10.0

Rank = tuple[int, float, float]


def shed_rank(now: float, idle_since: float | None, began: float, received: int) -> Rank:
    """The order a connection is shed in, smallest first: idle ones by how long they have waited, then
    unfinished requests by their rate (``received`` bytes since ``began``), then their age, then the ones
    idle for less than :data:`IDLE_GRACE`."""
    if idle_since is not None:
        return (IDLE if now - idle_since >= IDLE_GRACE else JUST_IDLE, idle_since, 0.0)
    return (UNFINISHED, received / max(now - began, 1e-3), began)


def pick(ranked: Iterable[tuple[Rank, T]], count: int) -> list[T]:
    """The ``count`` connections of ``ranked`` (rank, connection) to shed first."""
    return [connection for _, connection in heapq.nsmallest(count, ranked, key=lambda pair: pair[0])]


def keepalive_timeout(full: float, connections: int, cap: int) -> float:
    """Seconds an idle keep-alive connection is kept while ``connections`` of ``cap`` are open: ``full`` up
    to half the cap, then in proportion to the room left, never under a tenth of ``full``."""
    room = 1.0 - connections / cap
    if room >= 0.5:
        return full
    return full * max(KEEPALIVE_FLOOR, room / 0.5)


class Pressure:
    """One server process's cap of connections, the connections it is closing, and what it shed."""

    __slots__ = ("_told_at", "_untold", "cap", "going", "keepalive", "shed")

    def __init__(self, cap: int, keepalive: float) -> None:
        self.cap = cap
        self.keepalive = keepalive
        self.going = 0  # connections shed whose closing the event loop has not yet reported
        self.shed = [0, 0]  # connections shed since start: idle, unfinished
        self._untold = [0, 0]
        self._told_at = 0.0

    @property
    def margin(self) -> int:
        return max(1, self.cap // 16)

    def high_water(self) -> int:
        """Past this many open connections a new one makes room (none with a cap under :data:`MIN_CAP`)."""
        return self.cap if self.cap < MIN_CAP else self.cap - self.margin

    def low_water(self) -> int:
        return self.cap - 2 * self.margin

    def excess(self, open_connections: int) -> int:
        """How many connections to shed with ``open_connections`` open, a new one among them."""
        counted = open_connections - self.going
        if self.cap < MIN_CAP or counted <= self.high_water():
            return 0
        return counted - self.low_water()

    def keepalive_now(self, open_connections: int) -> float:
        return keepalive_timeout(self.keepalive, max(0, open_connections - self.going), self.cap)

    def note(self, kind: int, open_connections: int) -> None:
        """A connection of ``kind`` (:data:`IDLE` or :data:`UNFINISHED`) shed; told in the log now and then."""
        self.shed[kind] += 1
        self._untold[kind] += 1
        now = time.monotonic()
        if now - self._told_at >= _TOLD_EVERY:
            self._told_at = now
            idle, unfinished = self._untold
            self._untold = [0, 0]
            log.warning(
                "%d of %d connections open: %d idle connections and %d unfinished requests closed to make room"
                " (since the last such line)",
                open_connections,
                self.cap,
                idle,
                unfinished,
            )
