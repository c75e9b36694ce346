"""The de-duplication window: where the ingest script looks for an event id, and where it records it.

An event with an id (``svcgw.intake.envelope``) is forwarded once per window,
``max(SVCGW_LOG_RETENTION, 1 day)``: a repeat within it is counted as a
duplicate and dropped. The ids live in per-instance hashes, field = 16 raw
bytes of the id's SHA-256 (``RawEvent.digest``), value ``1``; how they expire
is the deployment's (the layout marker, :mod:`svcgw.storage.layoutversion`):

* ``hexpire``: one hash per instance (:func:`svcgw.storage.keys.dedup_container`),
  each field expiring after the window, written with ``HSETEX … FNX EX`` where
  the server has it, else ``HSETNX`` and one ``HEXPIRE`` per post; the key
  expires a window after the last post that added an id.
* ``buckets``: a hash per instance and window number ``n = floor(now / window)``
  (:func:`svcgw.storage.keys.dedup_bucket`). An id is a duplicate when bucket ``n`` or
  ``n - 1`` holds it; a new one goes to bucket ``n``, which expires at
  ``(n + 2) * window``. An id written at ``t`` is found until at least
  ``t + window`` (and at most ``t + 2 * window``): :func:`found_until`.
  ``now`` is Redis's clock (``TIME``, read once by the script) for both the
  bucket and its ``EXPIREAT``, whichever receiver posts: with the number from
  the receiver's clock and the expiry from Redis's, a Redis clock ``d`` ahead
  made the window ``window - d``, and two receivers on either side of a
  bucket's start did not look in the same buckets. The keys are named before
  the script runs, so the receiver names the bucket it expects (its clock's,
  corrected by what Redis answered last, :class:`svcgw.intake.ingest.Ingest`); when
  Redis's is another, the script writes nothing and answers it, and the
  receiver names that one: a second round trip about twice a day per receiver
  process (at each bucket's start, in the seconds the two clocks disagree).

Upgrade from layout 1 (one key per id, ``svcgw:dedup:<appid>:<key>``): until
the marker's ``since`` plus the window, the script also looks for the old key
of each id (``EXISTS``); it writes only the new containers. After that, no
old key is left, and none is passed.

:func:`plan` is pure: the ingest script's de-duplication KEYS and ARGV for one post.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from svcgw.config.settings import Settings
from svcgw.storage.keys import KeySpace
from svcgw.storage.layoutversion import HEXPIRE, Layout

__all__ = ["Plan", "bucket", "bucket_expiry", "found_until", "looks_for_old_keys", "plan", "window"]

# The shortest window, whatever the log's retention: senders repeat an event for hours.
MIN_WINDOW = 86400


def window(settings: Settings) -> int:
    """Seconds an event id is remembered."""
    return max(settings.log_retention, MIN_WINDOW)


def bucket(now: float, seconds: int) -> int:
    """The number of the window ``now`` falls in."""
    return int(now // seconds)


def bucket_expiry(n: int, seconds: int) -> int:
    """When bucket ``n`` may go (unix seconds): the end of window ``n + 1``, the last that looks in it."""
    return (n + 2) * seconds


def found_until(written: float, seconds: int) -> int:
    """The first time (unix seconds) an id written at ``written`` is no longer in a bucket looked at.

    At ``t`` the buckets looked at are ``bucket(t)`` and the one before it.
    """
    return bucket_expiry(bucket(written, seconds), seconds)


def looks_for_old_keys(layout: Layout, now: float, seconds: int) -> bool:
    """Whether layout 1's keys, written before ``layout.since``, may still be alive."""
    return now < layout.since + seconds


@dataclass(frozen=True)
class Plan:
    """The de-duplication part of one ingest script call."""

    keys: list[str]  # the container (or the current and the previous bucket), then the old keys, if any
    mode: str  # the script's commands: "hsetex", "hexpire" or "buckets"
    expiry: int  # hsetex, hexpire: a field's seconds; buckets: the window's seconds
    bucket: int | None = None  # buckets: the number of the current one, which Redis's clock must give too


def plan(
    keys: KeySpace,
    appid: str,
    event_keys: Sequence[str],
    layout: Layout,
    now: float,
    seconds: int,
    *,
    hsetex: bool,
    current: int | None = None,
) -> Plan:
    """KEYS and ARGV for the post's keyed events (``event_keys``, in order) at ``now``.

    ``current`` names the current bucket (buckets mode) instead of ``now``'s: the one Redis's clock gave.
    """
    if layout.dedup == HEXPIRE:
        found = Plan([keys.dedup_container(appid)], "hsetex" if hsetex else "hexpire", seconds)
    else:
        n = bucket(now, seconds) if current is None else current
        found = Plan([keys.dedup_bucket(appid, n), keys.dedup_bucket(appid, n - 1)], "buckets", seconds, n)
    if event_keys and looks_for_old_keys(layout, now, seconds):
        found.keys.extend(keys.dedup(appid, key) for key in event_keys)
    return found
