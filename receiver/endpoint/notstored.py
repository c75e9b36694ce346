"""Posts answered 503 because Redis did not store them: each logged with its cause, and counted in /metrics.

A storage error that reaches a post's answer (:data:`svcgw.errors.STORAGE_ERRORS`, or the layout
marker's :class:`svcgw.storage.layoutversion.LayoutError`) leaves nothing stored, and the sender
posts again; the operator must still learn that it happened and why. Each refusal is counted in
``svcgw_posts_not_stored_total{cause=...}``, ``cause`` being the error's class (a handful of
redis-py's: ``ConnectionError``, ``TimeoutError``, ``ResponseError``, ...), in shard 0's counters:
a shard that is down cannot hold the count of the posts it refused, and shard 0 not answering
fails the scrape anyway. The count is buffered as the posts' own are
(:class:`svcgw.counters.BufferedCounts`) and kept until a write succeeds.

Each cause of each shard is logged once, at once, with the error's message. While that cause
goes on (a Redis down refuses thousands of posts a second, and one line each would cost the
server the time it needs to answer the others), its further refusals are folded into the next
line about it, at most one every :data:`LOG_EVERY` seconds, which says how many there were.
The message is the error's, up to where it would quote a command: some of redis-py's Cluster
errors print the command they could not send (``No targets were found to execute ('EVALSHA', ...)``),
and the ingest script's arguments are the post. What names the server and what failed comes first.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from svcgw.counters import Command, not_stored_commands
from svcgw.storage.keys import KeySpace
from svcgw.storage.layoutversion import LayoutError

__all__ = ["LOG_EVERY", "NotStored", "message"]

log = logging.getLogger("svcgw.receiver")

LOG_EVERY = 10.0  # seconds between two lines about one cause of one shard
MESSAGE_CHARS = 200
# Where a quoted command would start: a tuple, list or dict as redis-py prints them.
_QUOTE = re.compile(r"[(\[{]")


class Counts(Protocol):
    """Where the counts go: a :class:`svcgw.counters.BufferedCounts`."""

    def add(self, commands: Iterable[Command]) -> None: ...


class NotStored:
    """Call it with each post refused for a storage error: it counts the post and logs the cause."""

    def __init__(self, counts: Counts, keys: KeySpace, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._counts = counts  # shard 0's
        self._keys = keys
        self._clock = clock
        # (shard, cause): when it was last logged, and the refusals since, not logged.
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}

    def __call__(self, shard: int, appid: str, exc: BaseException) -> None:
        cause = type(exc).__name__
        self._counts.add(not_stored_commands(self._keys, cause))
        now = self._clock()
        last, folded = self._seen.get((shard, cause), (-math.inf, 0))
        if now - last < LOG_EVERY:
            self._seen[(shard, cause)] = (last, folded + 1)
            return
        self._seen[(shard, cause)] = (now, 0)
        more = f" ({folded} more posts not stored for it since the last line)" if folded else ""
        # A layout this version cannot keep needs the operator; the rest usually passes by itself.
        level = logging.ERROR if isinstance(exc, LayoutError) else logging.WARNING
        log.log(
            level,
            "post not stored, answered 503: %s: %s%s",
            cause,
            message(exc),
            more,
            extra={"shard": shard, "appid": appid, "error": cause},
        )


def message(exc: BaseException) -> str:
    """The error's message up to where it would quote a command, at most :data:`MESSAGE_CHARS` characters."""
    text = _QUOTE.split(str(exc), maxsplit=1)[0].strip()
    return text[:MESSAGE_CHARS] or "(no message)"
