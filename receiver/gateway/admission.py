"""What a gateway call's checks read from Redis, in one round trip: key, rate, denial, ownership.

One Lua script (``svcgw/lua/gateway_admit.lua``) looks the presented key up
by its SHA-256 digest, refuses it if unknown or revoked, writes the key's
``last_used``, counts the call in the account's rate windows (the moving
window of :mod:`receiver.ratelimit`, whose script runs inside this one as a
function, so the limit has one implementation), says whether the operation
is in either denied set (the operator's, ``keys.account_denied``, and the
account's own, ``keys.account_own_denied``; compared without regard to
case), and reads the owner of the call's instance.

It only gathers facts: the gateway's handler judges them in the order of
the package docstring, with the body's own checks in between, so the
answer is the same as when each was read on its own. Nothing is cached in
the process: a revoked key fails on the very next call.

Reading the owner here needs the ``appid``, which is in the body; the
handler reads a small body before calling (see ``handlers``) and passes
``appid=None`` otherwise, and then reads the owner itself afterwards.
"""

from __future__ import annotations

import hmac
import math
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from svcgw import keys
from svcgw.scripts import admission
from svcgw.store import digest

from ..ratelimit import RateLimiter, Verdict, window_key
from .batch import ScriptBatch

__all__ = ["MAX_KEY_LENGTH", "Admission", "Facts"]

# A longer value is not a key this service issued; it is refused without a look-up.
MAX_KEY_LENGTH = 512

_MARK = "\x00"  # stands for an id in a key name, split around to give the script both halves


def _around(name: str) -> tuple[str, str]:
    before, after = name.split(_MARK)
    return before, after


@dataclass(frozen=True)
class Facts:
    """What Redis said about one call of an authenticated account."""

    account: str
    verdict: Verdict
    denied: bool
    owner: str | None  # None when not read (no appid yet) or no such instance


class Admission:
    def __init__(self, redis: Redis, limiter: RateLimiter) -> None:
        # The names the script builds: on a Redis Cluster, with the hash tag its client puts on
        # every key it names (svcgw.clusterspace), so that they are in the slot of its KEYS.
        tag: str = getattr(redis, "tag", "")
        names: list[str] = [
            *_around(tag + keys.api_key(_MARK)),
            *_around(tag + keys.account_denied(_MARK)),
            *_around(tag + keys.account_own_denied(_MARK)),
        ]
        for item in limiter.items:
            names.extend((*_around(tag + window_key(_MARK, item)), str(item.amount), str(item.get_expiry() * 1000)))
        # The calls of one turn of the event loop go to Redis in one pipeline (see .batch).
        self._script = ScriptBatch(redis, admission(names))
        self._clock = limiter.clock

    async def admit(self, *, key: str | None = None, account: str | None = None, operation: str,
                    appid: str | None) -> Facts | None:  # fmt: skip
        """The facts of a call made with ``key`` (None if it is no valid key), or for ``account``."""
        if account is None:
            if not key or len(key) > MAX_KEY_LENGTH:
                return None
            presented = digest(key)
            lookup = keys.api_key_lookup(presented)
        else:
            # Named, never read (ARGV[2] names the account): a key name, in the slot of the others.
            presented, lookup = "", keys.api_key_lookup("")
        now = "" if self._clock is None else str(math.floor(self._clock() * 1000))
        result = cast(
            list[Any],
            await self._script(
                keys=[lookup, keys.instance(appid or "")],
                args=[now, account or "", operation.lower(), "0" if appid is None else "1"],
            ),
        )
        if int(result[0]) == 0:
            return None
        found, stored = _text(result[1]), _text(result[2])
        # The look-up is by the digest already; comparing again in constant time costs nothing
        # and keeps a corrupted look-up entry from admitting another key's holder.
        if account is None and not hmac.compare_digest(stored, presented):
            return None
        allowed, wait = int(result[3]), int(result[4])
        verdict = Verdict(True, 0) if allowed else Verdict(False, Verdict.seconds(wait))
        owner = _text(result[6])
        return Facts(found, verdict, bool(int(result[5])), owner or None)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
