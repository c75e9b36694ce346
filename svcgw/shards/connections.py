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

With ``SVCGW_REDIS_SHARDS`` there are several Redis deployments (or one
Cluster): :func:`async_shard_client` and :func:`sync_shard_client` build the
client of a shard's deployment (:mod:`svcgw.shards.clients` keeps one per
deployment); :func:`async_client` and :func:`sync_client` are shard 0's,
which holds what belongs to the whole service. A Cluster's client is redis-py's
stock Cluster client: a shard's keys carry its tag (:mod:`svcgw.storage.keys`), which
is all it takes to keep them in one slot.

Every client's pool holds at most ``SVCGW_REDIS_MAX_CONNECTIONS`` connections
and, when all are in use, a command waits for one up to
``SVCGW_REDIS_POOL_TIMEOUT`` seconds, in turn, before it fails as Redis
unavailable (:mod:`svcgw.shards.pools`; the blocking clients, redis-py's
``BlockingConnectionPool``), so a burst is served late rather than refused.
On a Cluster, redis-py's client keeps a pool per node, and its asyncio client
has no waiting one (redis 8.1): there ``SVCGW_REDIS_MAX_CONNECTIONS`` bounds
each node's pool, and a command that finds it full fails at once.

The asyncio Cluster client is :class:`AsyncCluster`, redis-py's own with two changes. First, when a node
fails, redis-py closes the connections of the nodes it resets while other commands are still
using them, and those commands then fail with an ``AttributeError`` (a connection with no writer)
or a ``RuntimeError`` (uvloop's closed transport) rather than redis-py's ``ConnectionError``.
Every role handles a ``ConnectionError`` (not stored, try again: 503 to a post, a pause in the
worker); these two were not Redis errors to them, and reached a post as a 500 or ended the task
that stores the worker's outcomes, leaving its deliveries leased and never finished. The client
raises them as the ``ConnectionError`` they are. Second, after a node failed, redis-py learns the
slots again and then asks one master (the first it lists, which until the failover is the one that
failed) for the table of Redis's commands: every pipeline (the routes' read of every post among
them) then failed on every slot until the failover ended, not only on the failed master's. The
table does not change while the Cluster runs: the one learnt at the first use is kept when that
master does not answer (:class:`_KeptCommands`). Third, a pipeline that met a lost connection (or
``CLUSTERDOWN``) is not sent again: redis-py would close every connection of every node before each
new try, cutting off the commands in flight on the masters that still answer, and a master killed
is tried again by every pipeline of its slots (the posts of its instances, a single key's ``EXISTS``
among them) until its replica is promoted: the posts of the other slots were refused (503) all that
while, and the worker's reads of them failed. The pipeline fails at once, as a single command does,
and the client learns the slots again at its next command, keeping the connections in use
(:class:`_Pipeline`). Last, two costs of a busy worker or receiver: its connections pack commands by
hiredis, as one Redis's do (:func:`svcgw.shards.packing.pack_cluster`), and a key's slot is read
from its hash tag's, known once (:meth:`AsyncCluster.keyslot`): a script call names tens of keys,
and packing and slotting them in Python cost a Cluster's worker about a tenth of its CPU.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from redis import BlockingConnectionPool, Redis
from redis._parsers import AsyncCommandsParser
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import Sentinel, SentinelConnectionPool

from svcgw.config.settings import Settings, SettingsError
from svcgw.config.shards import Deployment, Shard
from svcgw.shards.packing import pack_cluster
from svcgw.shards.pools import WaitingPool, WaitingSentinelPool

__all__ = [
    "AsyncCluster",
    "AsyncSentinelRedis",
    "BlockingSentinelPool",
    "SentinelRedis",
    "async_client",
    "async_shard_client",
    "sync_client",
    "sync_shard_client",
]

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


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's blocking pool, for the primary a Sentinel names (the blocking clients)."""


class AsyncSentinelRedis(AsyncRedis):
    """A client of the primary that also closes its connections to the sentinels."""

    sentinels: AsyncSentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        sentinel, self.sentinels = self.sentinels, None
        if sentinel is not None:
            await sentinel.aclose()


class _KeptCommands(AsyncCommandsParser):
    """The table of Redis's commands a Cluster client reads keys with, kept when a refresh finds no answer."""

    async def initialize(self, node: AsyncClusterNode | None = None) -> None:
        try:
            await super().initialize(node)
        except (RedisConnectionError, RedisTimeoutError):
            if not self.commands:
                raise  # nothing learnt yet: the client cannot start


_TAG_SLOTS: dict[str, int] = {}  # a hash tag's slot (redis.crc.key_slot of the tag alone)
_TAGS_KEPT = 65536


class AsyncCluster(AsyncRedisCluster):
    """redis-py's asyncio Cluster client, whose commands cut off by a node's reset fail as a lost connection, and
    whose slots are learnt again after a node failed without asking that node."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = _KeptCommands()
        pack_cluster(self)

    def keyslot(self, key: Any) -> int:
        # Every key of the service carries its shard's hash tag, and a script call names tens of keys:
        # the slot of a tag seen before is a dict look-up, not an encoding and a CRC per key.
        if isinstance(key, str):
            start = key.find("{")
            if start > -1:
                end = key.find("}", start + 1)
                if end > start + 1:
                    tag = key[start + 1 : end]
                    slot = _TAG_SLOTS.get(tag)
                    if slot is None:
                        if len(_TAG_SLOTS) >= _TAGS_KEPT:
                            _TAG_SLOTS.clear()
                        slot = _TAG_SLOTS[tag] = key_slot(tag.encode())
                    return slot
        return super().keyslot(key)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except (AttributeError, RuntimeError) as exc:
            raise _lost(exc) from exc

    async def aclose(self) -> None:
        if _IN_PIPELINE.get():
            # redis-py's pipeline resets the client before trying again: learn the slots again at the next
            # command instead, and let the pipeline fail (see _Pipeline).
            self._initialize = True
            raise _NotAgain
        await super().aclose()

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> AsyncClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused by redis-py, as it says
        # redis-py's own ClusterPipeline is made the same way; its stubs leave an attribute abstract.
        return _Pipeline(self, transaction)  # type: ignore[abstract]


# Set while a pipeline of an AsyncCluster runs, in its task only: the client's reset is then the pipeline's retry.
_IN_PIPELINE: ContextVar[bool] = ContextVar("svcgw_in_cluster_pipeline", default=False)


class _NotAgain(Exception):
    """Raised in place of the reset redis-py's Cluster pipeline makes before it tries again."""


class _Pipeline(AsyncClusterPipeline):
    """redis-py's Cluster pipeline, whose commands cut off by a node's reset fail as a lost connection, and which
    fails at once on a lost connection rather than closing every connection of the client to try again."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        entered = _IN_PIPELINE.set(True)
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except _NotAgain as not_again:
            # The error the pipeline would have tried again after the reset: the caller's, as redis-py raised it.
            cause = not_again.__context__
            if isinstance(cause, Exception) and not isinstance(cause, _NotAgain):
                raise cause from None
            raise RedisConnectionError("the pipeline's node did not answer") from None
        except (AttributeError, RuntimeError) as exc:
            raise _lost(exc) from exc
        finally:
            _IN_PIPELINE.reset(entered)


def _lost(exc: Exception) -> RedisConnectionError:
    """The error of a command cut off by the Cluster client's reset.

    Raised from inside redis-py only: a connection closed under the command by the client's reset
    after a node failed (no writer or reader left, or a closed transport). As with any lost
    connection, the caller cannot tell whether the command ran.
    """
    return RedisConnectionError(f"connection closed under the command ({type(exc).__name__}: {exc})")


def _first(settings: Settings) -> Shard:
    layout = settings.shard_layout
    if not layout.deployments:
        raise SettingsError(
            "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required here; only `svcgw up` starts an embedded Redis"
        )
    return layout.shards[0]


def _sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT,
    }
    if settings.redis_sentinel_password:
        kwargs["password"] = settings.redis_sentinel_password
    return kwargs


def _primary_kwargs(
    deployment: Deployment, decode: bool, connect_timeout: float | None, read_timeout: float
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "decode_responses": decode,
        "health_check_interval": 30,
        "password": deployment.password,
        "db": deployment.db,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": read_timeout,
    }
    if deployment.username:
        kwargs["username"] = deployment.username
    return kwargs


def _cluster_kwargs(
    deployment: Deployment, decode: bool, connect_timeout: float | None, read_timeout: float
) -> dict[str, Any]:
    return {
        "decode_responses": decode,
        "username": deployment.username,
        "password": deployment.password,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": read_timeout,
        # After a few MOVED answers the client would refresh its whole map and close every
        # connection, commands in flight on them included (many at a first use, when its map is
        # still being learnt). A shard's keys all sit in its tag's slot: following each MOVED for
        # its own slot is enough, and a node that fails still refreshes the whole map.
        "reinitialize_steps": 0,
    }


@dataclass(frozen=True)
class _Flavour:
    """The classes of one flavour of client, blocking or asyncio: the same recipe builds both."""

    redis: type[Any]
    cluster: type[Any]
    node: type[Any]
    sentinel: type[Any]
    sentinel_redis: type[Any]
    pool: type[Any]  # a pool that waits for a free connection, and its Sentinel kind
    sentinel_pool: type[Any]
    pool_timeout: str  # the name of its waiting time

    def waiting(self, settings: Settings) -> dict[str, Any]:
        """The pool's size and how long a command waits for a connection when it is full."""
        return {"max_connections": settings.redis_max_connections, self.pool_timeout: settings.redis_pool_timeout}


_BLOCKING = _Flavour(
    Redis, RedisCluster, ClusterNode, Sentinel, SentinelRedis, BlockingConnectionPool, BlockingSentinelPool, "timeout"
)
_ASYNCIO = _Flavour(
    AsyncRedis, AsyncCluster, AsyncClusterNode, AsyncSentinel, AsyncSentinelRedis, WaitingPool,
    WaitingSentinelPool, "pool_timeout",
)  # fmt: skip


def _build(flavour: _Flavour, settings: Settings, shard: Shard, decode: bool, connect_timeout: float | None) -> Any:
    deployment = settings.shard_layout.deployments[shard.deployment]
    if deployment.kind == "cluster":
        # A Cluster client finds each key's master itself, and follows resharding and failover.
        nodes = [flavour.node(host, port) for host, port in deployment.addresses]
        kwargs = _cluster_kwargs(deployment, decode, connect_timeout, settings.redis_socket_timeout)
        # Each node's pool is bounded; redis-py's Cluster clients have no waiting one to offer.
        kwargs["max_connections"] = settings.redis_max_connections
        return flavour.cluster(startup_nodes=nodes, **kwargs)
    if deployment.kind == "sentinel":
        sentinel = flavour.sentinel(list(deployment.addresses), sentinel_kwargs=_sentinel_kwargs(settings))
        kwargs = _primary_kwargs(deployment, decode, connect_timeout, settings.redis_socket_timeout)
        client = sentinel.master_for(
            deployment.master,
            redis_class=flavour.sentinel_redis,
            connection_pool_class=flavour.sentinel_pool,
            **kwargs,
            **flavour.waiting(settings),
        )
        client.sentinels = sentinel
        return client
    pool = flavour.pool.from_url(
        deployment.url or "",
        decode_responses=decode,
        health_check_interval=30,
        socket_connect_timeout=connect_timeout,
        socket_timeout=settings.redis_socket_timeout,
        **flavour.waiting(settings),
    )
    return flavour.redis.from_pool(pool)


def sync_client(settings: Settings) -> Redis:
    """A blocking client of shard 0, for the one caller that has no event loop: the container health check."""
    return sync_shard_client(settings, _first(settings))


def async_client(settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> AsyncRedis:
    """The client of shard 0's deployment, which holds what belongs to the whole service.

    Typed as one Redis: the stock Cluster client answers every command the roles send as one
    Redis would, each key's in the slot of its tag.
    """
    return async_shard_client(settings, _first(settings), decode=decode, connect_timeout=connect_timeout)


def async_shard_client(
    settings: Settings, shard: Shard, *, decode: bool = False, connect_timeout: float | None = None
) -> AsyncRedis:
    """The asyncio client of one shard's deployment (on a Cluster, the Cluster's)."""
    client: AsyncRedis = _build(_ASYNCIO, settings, shard, decode, connect_timeout)
    return client


def sync_shard_client(
    settings: Settings, shard: Shard, *, decode: bool = False, connect_timeout: float | None = None
) -> Redis:
    """The blocking client of one shard's deployment (on a Cluster, the Cluster's)."""
    client: Redis = _build(_BLOCKING, settings, shard, decode, connect_timeout)
    return client
