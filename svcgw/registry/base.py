"""What every part of the store shares: its Redis client, names and vault, and ids.

What is not found raises ``svcgw.errors.NotFound``, naming the thing (account, API key, instance, destination).
API keys and receiver tokens are kept only as SHA-256 digests for look-up (:mod:`svcgw.digests`).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from svcgw.storage.keys import KeySpace
from svcgw.vault import TokenVault

if TYPE_CHECKING:
    from svcgw.registry.copies import ShardCopies

__all__ = ["StoreBase", "new_id", "optional_float"]


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(8)


def optional_float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


class StoreBase:
    """The client and vault every part of :class:`svcgw.registry.store.Store` works with."""

    def __init__(self, redis: Redis, vault: TokenVault, keys: KeySpace) -> None:
        # ``redis`` must be created with decode_responses=True. redis-py types
        # every answer as ``bytes | str`` whatever that flag says; with it set,
        # answers are ``str``, so the client is handled untyped here.
        self.redis: Any = redis
        self.vault = vault
        self.keys = keys  # shard 0's: the registry's
        # With several shards: the copies of registry data that instances' shards read (svcgw.registry.copies).
        self.copies: ShardCopies | None = None
