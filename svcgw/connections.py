"""Redis clients for every role, built from the settings in one place.

Two flavours: raw (bytes, for bodies that must stay byte-exact) and text
(``decode_responses=True``, for configuration).
"""

from __future__ import annotations

from redis import BlockingConnectionPool, Redis
from redis.asyncio import Redis as AsyncRedis

from .settings import Settings, SettingsError

__all__ = ["async_client", "sync_client"]


def _url(settings: Settings) -> str:
    if not settings.redis_url:
        raise SettingsError("SVCGW_REDIS_URL is required here; only `svcgw up` starts an embedded Redis")
    return settings.redis_url


def sync_client(settings: Settings, *, decode: bool = False, threads: int | None = None) -> Redis:
    """A client for ``threads`` threads at once: they wait for a free connection, never fail for lack of one."""
    if threads is None:
        return Redis.from_url(_url(settings), decode_responses=decode, health_check_interval=30)
    pool = BlockingConnectionPool.from_url(
        _url(settings),
        decode_responses=decode,
        health_check_interval=30,
        max_connections=threads + 4,
        timeout=30,
    )
    return Redis(connection_pool=pool)


def async_client(settings: Settings, *, decode: bool = False) -> AsyncRedis:
    return AsyncRedis.from_url(_url(settings), decode_responses=decode, health_check_interval=30)
