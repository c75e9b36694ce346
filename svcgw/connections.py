"""Redis clients for every role, built from the settings in one place.

Two flavours: raw (bytes, for bodies that must stay byte-exact) and text
(``decode_responses=True``, for configuration).

Redis is named either by ``SVCGW_REDIS_URL`` or through Sentinel
(``SVCGW_REDIS_SENTINELS`` and ``SVCGW_REDIS_SENTINEL_MASTER``). A Sentinel
client asks the sentinels for the current primary whenever it opens a
connection, so after a failover the next command reaches the promoted
replica; a command cut off by the failover fails with a ``ConnectionError``
like any other outage, and each role already treats that as "not stored,
try again".
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

from .settings import Settings, SettingsError

__all__ = ["AsyncSentinelRedis", "SentinelRedis", "async_client", "sync_client"]

# A sentinel that does not answer must not hold up the search for the primary.
SENTINEL_TIMEOUT = 2.0


class SentinelRedis(Redis):
    """A client of the primary that also closes its connections to the sentinels."""

    sentinels: Sentinel | None = None

    def close(self) -> None:
        super().close()
        sentinel, self.sentinels = self.sentinels, None
        if sentinel is not None:
            sentinel.close()


class AsyncSentinelRedis(AsyncRedis):
    """A client of the primary that also closes its connections to the sentinels."""

    sentinels: AsyncSentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        sentinel, self.sentinels = self.sentinels, None
        if sentinel is not None:
            await sentinel.aclose()


def _url(settings: Settings) -> str:
    if not settings.redis_url:
        raise SettingsError(
            "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required here; only `svcgw up` starts an embedded Redis"
        )
    return settings.redis_url


def _sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT,
    }
    if settings.redis_sentinel_password:
        kwargs["password"] = settings.redis_sentinel_password
    return kwargs


def _primary_kwargs(settings: Settings, decode: bool, connect_timeout: float | None = None) -> dict[str, Any]:
    return {
        "decode_responses": decode,
        "health_check_interval": 30,
        "password": settings.redis_password,
        "db": settings.redis_db,
        "socket_connect_timeout": connect_timeout,
    }


def sync_client(settings: Settings) -> Redis:
    """A blocking client, for the one caller that has no event loop: the container health check."""
    if settings.redis_sentinels:
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(settings.redis_sentinels), sentinel_kwargs=_sentinel_kwargs(settings)
        )
        client: SentinelRedis = sentinel.master_for(  # type: ignore[no-untyped-call]
            settings.redis_sentinel_master, redis_class=SentinelRedis, **_primary_kwargs(settings, False)
        )
        client.sentinels = sentinel
        return client
    return Redis.from_url(_url(settings), health_check_interval=30)


def async_client(settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> AsyncRedis:
    if settings.redis_sentinels:
        sentinel = AsyncSentinel(  # type: ignore[no-untyped-call]
            list(settings.redis_sentinels), sentinel_kwargs=_sentinel_kwargs(settings)
        )
        client: AsyncSentinelRedis = sentinel.master_for(
            settings.redis_sentinel_master,
            redis_class=AsyncSentinelRedis,
            **_primary_kwargs(settings, decode, connect_timeout),
        )
        client.sentinels = sentinel
        return client
    return AsyncRedis.from_url(
        _url(settings), decode_responses=decode, health_check_interval=30, socket_connect_timeout=connect_timeout
    )
