"""The known-browser lane's own event loop: its sign-ins' Redis calls and argon2 away from a flood's turns.

A flood of sign-ins from many addresses is cheap to refuse one by one, yet
the server's event loop still reads, parses and answers every request of it:
with 400 addresses sending at once, one turn of the loop takes half a second
to two seconds on two busy cores. Each await of a sign-in on that loop waits
for such a turn, and a Redis round trip is two or three of them (the reply
read, the waiting task woken), so a known browser's sign-in, with its three
round trips and its argon2 run, took 7 to 11 s during a flood's opening burst
(against about 1 s without), however few its own calls were.

So the lane's work runs on an event loop of its own, in a thread of its own,
with a Redis client of its own (shard 0's, built in that thread and used
only there; at most a connection per place of the lane) and an argon2
thread of its own. The server's loop hands each sign-in of the lane over
and waits for it once: one turn of the flood's, not one per await. The
thread needs the GIL only between its awaits, which Python hands over within
its switch interval (5 ms) however busy the server's loop is.

Started when first needed: a process whose console no known browser signs
in to never starts it. :meth:`LaneLoop.aclose` (the app's lifespan, at its
end) closes its client and stops its loop and threads; until then the thread
holds them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["LaneLoop"]

T = TypeVar("T")


class LaneLoop:
    """An event loop in a daemon thread, with a Redis client ``connect()`` builds there, and argon2 threads.

    ``hashing``: how many argon2 runs at once (each 64 MiB): the executor of :meth:`in_thread`.
    """

    def __init__(self, connect: Callable[[], Any], hashing: int) -> None:
        self._connect = connect
        self._hashing = hashing
        self._started = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._redis: Any = None
        self._threads: ThreadPoolExecutor | None = None

    async def run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work(redis)`` on the lane's loop, with the lane's client; its result here, or its error.

        Cancelled here, it is cancelled there.
        """
        loop = self._loop or self._start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._with_redis(work), loop))

    async def in_thread(self, work: Callable[[], T]) -> T:
        """``work()`` on the lane's argon2 threads; called on the lane's loop. A caller cancelled stops waiting and
        the run goes on: the threads still bound the lane's runs (and their memory)."""
        assert self._threads is not None
        return await asyncio.get_running_loop().run_in_executor(self._threads, work)

    async def _with_redis(self, work: Callable[[Any], Awaitable[T]]) -> T:
        if self._redis is None:
            self._redis = self._connect()  # in the lane's thread: its connections belong to this loop
        return await work(self._redis)

    async def aclose(self) -> None:
        """Close the lane's client, then stop its loop and threads; nothing to do for a lane never started."""
        loop, thread, threads = self._loop, self._thread, self._threads
        if loop is None or thread is None or threads is None:
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_redis(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        threads.shutdown(wait=False)
        self._loop = self._thread = self._threads = None

    async def _close_redis(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._started:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._threads = ThreadPoolExecutor(self._hashing, thread_name_prefix="svcgw-signin-lane-argon2")
                # The thread holds this object (its client) until aclose: nothing of it is collected unclosed.
                self._thread = threading.Thread(target=self._run, args=(loop,), name="svcgw-signin-lane", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_forever()
        finally:
            loop.close()
