"""Commands packed into Redis's protocol by hiredis, on the asyncio clients' connections.

redis-py's blocking connections pack with hiredis when it is installed; its
asyncio connections (redis 8.1) always pack in Python, an argument at a time.
The delivery engine's finish script and the receiver's ingest script carry
tens to thousands of arguments a call, and that packing was 5 to 8 % of either
role's CPU (py-spy, ``python -m tests.bench.pipeline``). hiredis packs the
same bytes (``tests/svcgw/shards/test_packing.py``) in a single C call.

Only the plain case is handed to hiredis: a first argument of one word, every
argument ``bytes``, ``str``, ``int`` or ``float``. Anything else (``CONFIG GET``
as one argument, a ``memoryview``, a value redis-py refuses with its own
``DataError``) goes to redis-py's packer, as before.
"""

from __future__ import annotations

from typing import Any

import hiredis

__all__ = ["packing"]


class _HiredisPacking:
    """Mixed in front of an asyncio ``Connection`` class: :meth:`pack_command` by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if args and _one_word(args[0]):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # an argument hiredis does not take: redis-py's packer encodes it, or refuses it
        packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
        return packed


def _one_word(name: object) -> bool:
    """Whether a command's first argument is a single word (redis-py splits ``CONFIG GET`` in two)."""
    if isinstance(name, str):
        return " " not in name
    return isinstance(name, bytes) and b" " not in name


_MADE: dict[type[Any], type[Any]] = {}


def packing(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` with hiredis's packing (one class per original, made once)."""
    if issubclass(connection_class, _HiredisPacking):
        return connection_class
    made = _MADE.get(connection_class)
    if made is None:
        made = type(connection_class.__name__, (_HiredisPacking, connection_class), {"__module__": __name__})
        _MADE[connection_class] = made
    return made
