"""A Redis connection pool that, when every connection is in use, waits a bounded time for one.

redis-py's own :class:`~redis.asyncio.ConnectionPool` fails a command at once
with ``MaxConnectionsError`` when all of its ``max_connections`` are in use,
so a burst of requests, however short, is answered "storage unavailable".
:class:`WaitingPool` (and :class:`WaitingSentinelPool`, the same for a primary
found through Sentinel) takes a free connection as that pool does and, only
when there is none, waits for one to be released, in turn, for at most
``pool_timeout`` seconds; then the command fails with a ``ConnectionError``
like any other outage, which every role already treats as "not stored, try
again".

It is redis-py's :class:`~redis.asyncio.BlockingConnectionPool` in behaviour,
without its cost when a connection is free: that pool enters a timeout scope
and a condition for every command, about 9 µs of CPU each (some 30 % of the
client's whole command path, measured with hiredis on uvloop); this one looks
at the pool once and waits only when it is full. Waiters are served in
order: a command arriving while others wait joins the end of the line
rather than taking the connection just released for the first of them.

It is built of the hooks redis-py's pools are made of, which its own
``BlockingConnectionPool`` uses too: ``can_get_connection``;
``get_available_connection``, which takes a free connection (or makes one)
at once, without yielding to the loop, so the look and the take are one
step; and ``ensure_connection``. redis-py's ``get_connection`` is not
called, so nothing here depends on the order of what it does. Like
``BlockingConnectionPool``, it does not take the pool's lock for every
command. That lock guards the pool against a maintenance notification
(RESP3, on by default in redis 8) rewriting it across awaits; redis-py says
when that happens through the pool's ``set_in_maintenance``, and this pool
then waits the rewrite out. The one other holder of the lock across an await
is a release closing a connection marked for reconnecting (maintenance
again): a command arriving then may open one more connection than
``max_connections`` for that moment, rather than fail. The OpenTelemetry counts that method records are not
kept (the service does not turn redis-py's on). Upstream lacks an asyncio
pool that waits only when it has no connection to give;
``tests/svcgw/shards/test_pools.py`` pins the hooks' behaviour on the pinned
redis-py.

Its connections pack commands with hiredis (:mod:`svcgw.shards.packing`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError

from svcgw.shards.packing import packing

__all__ = ["DEFAULT_POOL_TIMEOUT", "WaitingPool", "WaitingSentinelPool"]

DEFAULT_POOL_TIMEOUT = 5.0


class _Waiting(ConnectionPool):
    """The waiting, for redis-py's asyncio ``ConnectionPool`` or a kind of it that this is mixed in front of.

    Commands that find the pool full wait in a line, each on a future of its own. A connection
    released wakes the first of the line, and the pool keeps it for that waiter: while one is
    woken and has not taken it yet, a command arriving finds the line and joins its end. A woken
    waiter that took its connection wakes the next if another is free; one that timed out or was
    cancelled before taking it passes its turn on.
    """

    def __init__(self, *args: Any, pool_timeout: float = DEFAULT_POOL_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_class = packing(self.connection_class)
        self.pool_timeout = pool_timeout
        self._line: deque[asyncio.Future[None]] = deque()
        self._woken = 0  # waiters woken that have not taken their connection yet: 0 or 1
        self._in_maintenance = False

    def set_in_maintenance(self, in_maintenance: bool) -> None:
        """Called by redis-py, with the pool's lock held, around a rewrite of the pool by a MOVING notification."""
        self._in_maintenance = in_maintenance

    def can_get_connection(self) -> bool:  # redis-py's, typed
        return bool(super().can_get_connection())

    async def get_connection(self, command_name: str | None = None, *keys: Any, **options: Any) -> AbstractConnection:
        """A connected connection from the pool, waiting for one in turn if none is free.

        The arguments are redis-py's deprecated ones, taken for its callers and unused, as there.
        """
        connection: AbstractConnection
        if self._in_maintenance:
            await self._maintenance_over()
        if self._line or self._woken or not self.can_get_connection():
            await self._wait()  # woken: the pool keeps a connection for this one until it takes it
            try:
                if self._in_maintenance:
                    await self._maintenance_over()
                connection = self.get_available_connection()  # type: ignore[no-untyped-call]
            finally:
                self._woken -= 1
                self._wake_next()
        else:
            # No await between the look and the take: no other command can take it in between.
            connection = self.get_available_connection()  # type: ignore[no-untyped-call]
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def _maintenance_over(self) -> None:
        """Until a rewrite of the pool by a maintenance notification is over: it holds the pool's lock till then."""
        while self._in_maintenance:
            async with self._get_pool_lock():
                pass

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        if self._line:
            self._wake_next()

    def _wake_next(self) -> None:
        if self._woken or not self.can_get_connection():
            return
        while self._line:
            turn = self._line.popleft()
            if not turn.done():  # a waiter that gave up before its turn is skipped
                turn.set_result(None)
                self._woken += 1
                return

    async def _wait(self) -> None:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        try:
            async with asyncio.timeout(self.pool_timeout):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():
                # Woken, then timed out or cancelled before taking its connection: the next one's.
                self._woken -= 1
                self._wake_next()
            else:
                turn.cancel()
            if isinstance(exc, TimeoutError):
                raise RedisConnectionError(
                    f"no Redis connection free within {self.pool_timeout} s ({self.max_connections} in use)"
                ) from None
            raise


class WaitingPool(_Waiting):
    """An asyncio connection pool of at most ``max_connections`` that waits ``pool_timeout`` s for one when full."""


class WaitingSentinelPool(_Waiting, SentinelConnectionPool):
    """:class:`WaitingPool` for the primary a Sentinel names (``Sentinel.master_for(connection_pool_class=...)``)."""
