"""Where a delivery's attempt records are kept: fields ``a1`` .. ``aN`` of its delivery hash.

Each attempt leaves one JSON record (time, status or error, duration, the
first 1 KB of the answer's body). The finish script (``queue_finish.lua``)
counts it with ``HINCRBY attempts`` and stores it as field ``a<count>`` of the
delivery hash in the ``HSET`` it sends anyway: no command is added, and the
records share the hash's key, expiry and listpack (a list key of its own cost
376 bytes per delivery for a 150-byte record). A record stays well under
``hash-max-listpack-value`` (2,048, ``svcgw.storage.serverconfig``), so the hash stays a
listpack.

Earlier versions kept the records in a list key of their own
(:func:`svcgw.storage.keys.delivery_attempts`). A delivery in flight when a deployment
is upgraded has its first records there and its later ones in the hash, so
readers read both and :func:`merged` takes, for each number, the hash's record
or else the list's. Once ``SVCGW_DEAD_LETTER_RETENTION`` has passed since the
upgrade no such list is left, and reading it costs one command per delivery
shown, in the same pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["COUNT", "count_of", "field", "fields", "from_hash", "merged"]

# The delivery hash's field that counts its attempts (and names the last record).
COUNT = "attempts"


def field(number: int) -> str:
    """The delivery hash's field of attempt ``number`` (from 1)."""
    return f"a{number}"


def fields(count: int) -> list[str]:
    """The fields of attempts 1 to ``count``."""
    return [field(number) for number in range(1, count + 1)]


def count_of(value: bytes | str | None) -> int:
    """The attempt count stored in the delivery hash; 0 when absent or unreadable."""
    if value is None:
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def merged(count: int, stored: Sequence[bytes | str | None], legacy: Sequence[bytes | str] = ()) -> list[bytes | str]:
    """Attempt records 1 to ``count``, oldest first: the hash's ``stored`` values, else the old list's.

    ``stored`` are the values of :func:`fields` (``count``) in order; ``legacy``
    the list key of earlier versions. Records found in neither (a count raised
    by a record whose write was lost) are left out.
    """
    records: list[bytes | str] = []
    for index in range(max(count, len(legacy))):
        value = stored[index] if index < len(stored) else None
        if value is None and index < len(legacy):
            value = legacy[index]
        if value is not None:
            records.append(value)
    return records


def from_hash(data: Mapping[str, bytes | str], legacy: Sequence[bytes | str] = ()) -> list[bytes | str]:
    """Attempt records of a whole delivery hash (``HGETALL``, field names decoded), merged with the old list's."""
    count = count_of(data.get(COUNT))
    return merged(count, [data.get(name) for name in fields(count)], legacy)
