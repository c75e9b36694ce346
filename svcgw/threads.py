"""The one way this service runs blocking work off the event loop: :func:`in_thread`.

It is ``anyio.to_thread.run_sync``, the thread pool Starlette itself runs
on, so every role of the service has one pool of worker threads (and one
limit on them) whatever part of it offloads work: parsing large bodies,
DNS look-ups of the connect-time rules, argon2 hashes, URL checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import anyio.to_thread

__all__ = ["in_thread"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def in_thread(func: Callable[[*Ts], T], *args: *Ts, abandon_on_cancel: bool = True) -> T:
    """``func(*args)`` in a worker thread.

    A cancelled caller stops waiting at once and the thread finishes on its
    own (``abandon_on_cancel``), so a timeout around a slow DNS look-up
    fires on time. Work that holds something until it is done (a slot of a
    semaphore) passes False: the caller then waits for the thread when it
    is cancelled by an anyio cancel scope (as Starlette's are).
    """
    return await anyio.to_thread.run_sync(func, *args, abandon_on_cancel=abandon_on_cancel)
