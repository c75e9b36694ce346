"""What a gateway call's checks read from Redis, in one round trip: key, rate, denial, ownership.

One Lua script (``svcgw/storage/lua/gateway_admit.lua``) looks the presented key up
by its SHA-256 digest, refuses it if unknown or revoked, writes the key's
``last_used``, counts the call in the account's rate windows (the moving
window of :mod:`receiver.ratelimit`, whose script runs inside this one as a
function, so the limit has one implementation), says whether the operation
is in either denied set (the operator's, ``keys.account_denied``, and the
account's own, ``keys.account_own_denied``; compared without regard to
case), and reads the owner of the call's instance.

It only gathers facts: the gateway's handler judges them in the order of
the package docstring, with the body's own checks in between, so the
answer is the same as when each was read on its own.

The script names every key it touches in KEYS (docs/redis-layout.md,
"Scripts and their KEYS"), and those of a key call depend on the key's id
(its hash) and on its account (the rate windows and denied sets), which
only Redis knows. A key's id and account never change, so the
:class:`Admission` remembers both per presented digest, for the life of the
process (at most :data:`REMEMBERED` digests; then it starts again), and
names the keys from them. The script checks that the look-up still gives
that id and the key's hash that account; otherwise it writes nothing and
answers what they are, and the call is made again under those names. So a
key costs extra round trips only on its first call in a process: one to
learn its id, one to learn its account (its hash is named only then).
Everything else is read on every call: a revoked key fails on the very
next call, remembered or not. A call made for an account (the console's)
names its keys at once.

Reading the owner here needs the ``appid``, which is in the body; the
handler reads a small body before calling (see ``handlers``) and passes
``appid=None`` otherwise, and then reads the owner itself afterwards.
"""

from __future__ import annotations

import hmac
import logging
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from redis.asyncio import Redis

from svcgw.digests import digest
from svcgw.storage.scripts import batched

from ..ratelimit import RateLimiter, Verdict, window_key

__all__ = ["MAX_KEY_LENGTH", "REMEMBERED", "Admission", "Facts"]

log = logging.getLogger("svcgw.gateway")

# A longer value is not a key this service issued; it is refused without a look-up.
MAX_KEY_LENGTH = 512

# Digests remembered at most (about 800 bytes each with its key names, under one rate limit: some
# 80 MB when full); past it, the memory starts again, and each key in use pays its first call's
# round trips once more.
REMEMBERED = 100_000

# The script's answers (gateway_admit.lua) besides a refusal (0).
_FOUND, _RENAMED = 1, 2

# A key's first call learns its id, then its account, then is admitted; a third answer to name
# it again would mean they changed between two calls, which they never do.
_TRIES = 3


@dataclass(frozen=True)
class Facts:
    """What Redis said about one call of an authenticated account."""

    account: str
    verdict: Verdict
    denied: bool
    owner: str | None  # None when not read (no appid yet) or no such instance


class _Named(NamedTuple):
    """What a call of one key names, as far as it is known: the key's id, its account and their keys."""

    key_id: str
    account: str
    key_hash: str  # svcgw:apikey:<id>
    account_keys: tuple[str, ...]  # the denied sets, then the rate windows (gateway_admit.lua's KEYS[4..])


class Admission:
    def __init__(self, redis: Redis, limiter: RateLimiter) -> None:
        self.keys = limiter.keys  # shard 0's: keys and accounts live there
        # The look-up of a call made for an account: a name that never exists (a digest is never empty).
        self._no_lookup = self.keys.api_key_lookup("")
        # The calls of one turn of the event loop go to Redis in one pipeline (svcgw.storage.scriptbatch).
        self._script = batched(redis, "gateway_admit")
        self._clock = limiter.clock
        self._items = limiter.items
        self._limits: list[str] = []
        for item in limiter.items:
            self._limits.extend((str(item.amount), str(item.get_expiry() * 1000)))
        self._known: dict[str, _Named] = {}  # by the presented key's digest
        # A key not remembered yet: names that never exist (key ids and accounts are never empty),
        # so that the script's check fails before it reads anything under them.
        self._unknown = self._named("", "")

    async def admit(self, *, key: str | None = None, account: str | None = None, operation: str,
                    appid: str | None) -> Facts | None:  # fmt: skip
        """The facts of a call made with ``key`` (None if it is no valid key), or for ``account``."""
        operation = operation.lower()
        instance = self.keys.instance(appid or "")  # named, never read, without an appid
        owner = "0" if appid is None else "1"
        if account is not None:
            # The look-up and key hash are names that never exist, not read (ARGV[6] is '0').
            named = self._named("", account)
            return _facts(await self._call(named, instance, self._no_lookup, operation, owner, with_key=False))
        if not key or len(key) > MAX_KEY_LENGTH:
            return None
        presented = digest(key)
        lookup = self.keys.api_key_lookup(presented)
        named = self._known.get(presented, self._unknown)
        for _ in range(_TRIES):
            result = await self._call(named, instance, lookup, operation, owner, with_key=True)
            if int(result[0]) != _RENAMED:
                break
            named = self._named(_text(result[1]), _text(result[2]))
            if named.account:
                if len(self._known) >= REMEMBERED:
                    self._known.clear()
                self._known[presented] = named
        else:
            # Refused as a key that changed under the call would be; nothing was written.
            log.warning("API key %s: its id or account changed between calls; the call is refused", named.key_id)
            return None
        facts = _facts(result)
        # The look-up is by the digest already; comparing again in constant time costs nothing
        # and keeps a corrupted look-up entry from admitting another key's holder.
        if facts is None or not hmac.compare_digest(_text(result[2]), presented):
            return None
        return facts

    async def _call(self, named: _Named, instance: str, lookup: str, operation: str, owner: str, *,
                    with_key: bool) -> list[Any]:  # fmt: skip
        now = "" if self._clock is None else str(math.floor(self._clock() * 1000))
        return cast(
            list[Any],
            await self._script(
                keys=[lookup, named.key_hash, instance, *named.account_keys],
                args=[now, named.account, operation, owner, named.key_id, "1" if with_key else "0", *self._limits],
            ),
        )

    def _named(self, key_id: str, account: str) -> _Named:
        windows = (window_key(self.keys, account, item) for item in self._items)
        account_keys = (self.keys.account_denied(account), self.keys.account_own_denied(account), *windows)
        return _Named(key_id, account, self.keys.api_key(key_id), account_keys)


def _facts(result: list[Any]) -> Facts | None:
    """The facts of the script's answer ``{1, ...}``; None for any other."""
    if int(result[0]) != _FOUND:
        return None
    allowed, wait = int(result[3]), int(result[4])
    verdict = Verdict(True, 0) if allowed else Verdict(False, Verdict.seconds(wait))
    owner = _text(result[6])
    return Facts(_text(result[1]), verdict, bool(int(result[5])), owner or None)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
