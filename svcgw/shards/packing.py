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

What upstream lacks: the blocking ``Connection`` takes a ``command_packer``,
the asyncio one has no such option, so the one way in is to override its
public ``pack_command``, which its ``send_command`` and ``pack_commands`` (a
pipeline's) call for every command. Each connection class redis-py's asyncio
pools pick (by URL scheme, or a Sentinel's) has its packing kind declared
here, once; the tests pin that redis-py still calls ``pack_command`` on
every path and still offers no ``command_packer`` to the asyncio connections.

redis-py's asyncio Cluster client takes no connection class either: its
constructor fixes ``Connection`` (or ``SSLConnection``) in the keyword
arguments every node it creates gets, which its public
``get_connection_kwargs()`` returns and redis-py itself amends for the nodes it
discovers later. :func:`pack_cluster` sets the packing kind there and on the
startup nodes, once, at the client's construction; the tests pin that every
node of a Cluster, those learnt after a failover included, then packs by
hiredis.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

__all__ = ["pack_cluster", "packing"]


class _HiredisPacking(AbstractConnection):
    """Mixed in front of an asyncio connection class: :meth:`pack_command` by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if args and _one_word(args[0]):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # an argument hiredis does not take: redis-py's packer encodes it, or refuses it
        return super().pack_command(*args)


def _one_word(name: object) -> bool:
    """Whether a command's first argument is a single word (redis-py splits ``CONFIG GET`` in two)."""
    if isinstance(name, str):
        return " " not in name
    return isinstance(name, bytes) and b" " not in name


class PackingConnection(_HiredisPacking, Connection):
    """A TCP connection (``redis://``)."""


class PackingSSLConnection(_HiredisPacking, SSLConnection):
    """A TLS connection (``rediss://``)."""


class PackingUnixDomainSocketConnection(_HiredisPacking, UnixDomainSocketConnection):
    """A Unix socket connection (``unix://``)."""


class PackingSentinelManagedConnection(_HiredisPacking, SentinelManagedConnection):
    """A connection to the primary a Sentinel names."""


class PackingSentinelManagedSSLConnection(_HiredisPacking, SentinelManagedSSLConnection):
    """A TLS connection to the primary a Sentinel names."""


_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: PackingConnection,
    SSLConnection: PackingSSLConnection,
    UnixDomainSocketConnection: PackingUnixDomainSocketConnection,
    SentinelManagedConnection: PackingSentinelManagedConnection,
    SentinelManagedSSLConnection: PackingSentinelManagedSSLConnection,
}


def packing(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """The packing kind of ``connection_class``; a class of anyone else's keeps redis-py's packer."""
    return _PACKING.get(connection_class, connection_class)


def pack_cluster(client: AsyncRedisCluster) -> None:
    """Make every connection of the asyncio Cluster ``client`` pack by hiredis: its nodes' and its future nodes'."""
    kwargs = client.get_connection_kwargs()
    kwargs["connection_class"] = packing(kwargs.get("connection_class") or Connection)
    for node in client.startup_nodes:
        node.connection_class = packing(node.connection_class)  # type: ignore[assignment]
