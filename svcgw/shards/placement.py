"""Shards: the Redis deployments (or a Cluster's hash tags) instances are placed on, and placement.

Pure: no I/O. A *deployment* is one Redis the service connects to (a URL, a
Sentinel group or one Redis Cluster); a *shard* is where an instance's keys
live: one deployment, or, on a Cluster, one virtual shard, the hash tag
``{s<i>}`` (every key of the shard carries it, so every multi-key command and
script of one shard stays in one slot, and resharding the Cluster moves
slots, never our data).

Shard 0 also holds what belongs to the whole service: accounts, keys,
sessions, the instance registry, rate windows and the instance counts that
placement reads (:mod:`svcgw.shardkeys`).

Placement (:func:`place`) gives a new instance the open shard with the
fewest instances relative to its weight, the lowest index on a tie. It is
only ever asked for a new instance: nothing here moves a placed one.
:func:`placement_order` ranks every open shard the same way, so that a
caller whose first choice does not answer tries the next best.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from svcgw.config.shards import Shard
from svcgw.errors import Failure

__all__ = [
    "MAX_SHARD_DIGITS",
    "NoOpenShard",
    "instance_counts",
    "place",
    "placement_order",
    "shard_of_token",
    "token_for_shard",
]


class NoOpenShard(Failure):
    """Every shard is closed to new instances (the settings refuse that; a guard, not a path)."""


def place(shards: Sequence[Shard], counts: Mapping[int, int]) -> Shard:
    """The open shard with the fewest instances per weight (``counts``: index -> instances); ties: lowest index."""
    return min(_open(shards), key=_load(counts))


def placement_order(shards: Sequence[Shard], counts: Mapping[int, int]) -> list[Shard]:
    """Every open shard, best first: :func:`place`'s choice, then the one it would make without it, and so on."""
    return sorted(_open(shards), key=_load(counts))


def _open(shards: Sequence[Shard]) -> list[Shard]:
    open_shards = [shard for shard in shards if not shard.closed]
    if not open_shards:
        raise NoOpenShard("every shard is closed to new instances")
    return open_shards


def _load(counts: Mapping[int, int]) -> Callable[[Shard], tuple[float, int]]:
    return lambda shard: (counts.get(shard.index, 0) / shard.weight, shard.index)


def instance_counts(stored: Mapping[str, str], total: int, shards: Sequence[Shard]) -> dict[int, int]:
    """Instances per shard from the counts hash (field: index) and the number of every instance.

    Instances registered before shards were counted are on shard 0 (there
    was no other), so shard 0 holds what the other counts do not explain:
    adding shards to a running deployment needs no change to Redis.
    """
    counts = {shard.index: _number(stored.get(str(shard.index))) for shard in shards}
    others = sum(count for index, count in counts.items() if index != 0)
    counts[0] = max(counts.get(0, 0), total - others)
    return counts


def _number(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


# A receiver token is ``token_urlsafe`` text (letters, digits, ``-`` and ``_``): the ``.`` after
# the shard's ``s<i>`` cannot occur in it, so a token says its shard without a look-up.
_SHARD_MARK = "s"
_SHARD_END = "."
# A shard's number in a token has at most this many digits: far more shards than any deployment has,
# and a longer one is looked at no further (Python reads no integer of more than 4,300 digits).
MAX_SHARD_DIGITS = 6


def token_for_shard(secret: str, shard: int) -> str:
    """The receiver token of an instance on ``shard``: the secret itself on shard 0, ``s<i>.<secret>`` else.

    Shard 0's tokens are exactly today's, so a deployment of one shard keeps
    its receiver URLs' shape, and every token made before shards existed
    names shard 0, where its instance is. The token's digest (the receiver
    look-up) covers the prefix, so a token edited to name another shard is
    no receiver there.
    """
    if shard == 0:
        return secret
    return f"{_SHARD_MARK}{shard}{_SHARD_END}{secret}"


def shard_of_token(token: str) -> int | None:
    """The shard a receiver token names (0 without a prefix); None for a malformed prefix.

    Malformed: anything but ``s``, then 1 to :data:`MAX_SHARD_DIGITS` ASCII
    digits without a leading zero, then ``.``. None is the receiver's 404,
    whatever the token holds.
    """
    head, sep, _ = token.partition(_SHARD_END)
    if not sep:
        return 0
    number = head.removeprefix(_SHARD_MARK)
    if head == number or not 0 < len(number) <= MAX_SHARD_DIGITS:
        return None
    if not (number.isascii() and number.isdigit()) or number.startswith("0"):
        return None
    return int(number)
