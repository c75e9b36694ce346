"""Call rate per developer account: a moving window in Redis.

``SVCGW_RATE_LIMIT`` is read with ``limits`` (``300/minute``, or several
limits such as ``10/second;300/minute``, each enforced). The limit is per
account, shared by all its keys and by every server process, since the
window lives in Redis.

Each limit is one Redis list per account holding the timestamps of the
account's latest calls, newest first, trimmed to the limit's amount: the
same layout as the moving window of ``limits``. One Lua script
(``svcgw/storage/lua/rate_window.lua``) checks and records every limit at once, so
concurrent calls on several processes cannot slip past each other.

The time of a call is the Redis server's clock by default, read inside the
script, so every process shares one clock. A :data:`Clock` may be given
instead (tests drive time with one); it is read once per call.

What counts: every call made with a valid key, whatever its outcome. That
includes a call refused here with 429, because the spec says an immediate
retry keeps consuming quota; this is the one point where the window differs
from ``limits``' own strategy, which records only accepted hits.

``Retry-After`` is honest: a refused call is told the whole seconds until
the oldest call still in a full window leaves it, and a caller that waits
that long, calling nothing meanwhile, gets through. Since the refused call
itself is in the window, that is the oldest of the latest ``amount`` calls
counting it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from limits import RateLimitItem, parse_many
from redis.asyncio import Redis

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["Clock", "RateLimiter", "Verdict", "window_key"]

Clock = Callable[[], float]
"""Seconds since the epoch, as ``time.time`` gives them."""


def window_key(keys: KeySpace, account_id: str, item: RateLimitItem) -> str:
    """List of call timestamps of one account under one limit, newest first."""
    return keys.rate_window(account_id, f"{item.amount}/{item.get_expiry()}")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # whole seconds; 0 when allowed

    @staticmethod
    def seconds(milliseconds: int) -> int:
        """Whole seconds after which ``milliseconds`` have certainly passed (at least 1)."""
        return max(1, math.ceil(milliseconds / 1000))


class RateLimiter:
    """The limits of ``rate`` (``limits`` notation), per account; ``clock`` None is the Redis server's."""

    def __init__(self, redis: Redis, keys: KeySpace, rate: str, *, clock: Clock | None = None) -> None:
        self.keys = keys
        self.items: list[RateLimitItem] = parse_many(rate)
        if not self.items or any(item.amount < 1 for item in self.items):
            raise ValueError(f"a rate limit needs at least one call per window, got {rate!r}")
        self._script = register(redis, "rate_window")
        self._clock = clock
        self._args: list[int] = []
        for item in self.items:
            self._args.extend((item.amount, item.get_expiry() * 1000))

    @property
    def clock(self) -> Clock | None:
        """The clock of the windows; None is the Redis server's."""
        return self._clock

    async def hit(self, account_id: str) -> Verdict:
        """Record one call of the account and say whether it may go ahead."""
        now = "" if self._clock is None else str(math.floor(self._clock() * 1000))
        result = cast(
            list[Any],
            await self._script(
                keys=[window_key(self.keys, account_id, item) for item in self.items], args=[now, *self._args]
            ),
        )
        allowed, wait = int(result[0]), int(result[1])
        if allowed:
            return Verdict(True, 0)
        return Verdict(False, Verdict.seconds(wait))
