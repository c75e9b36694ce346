"""The Redis settings the service relies on, in one place.

The embedded Redis of ``svcgw up`` is started with them, so are the
benchmark's and the tests' own servers, and an operator's Redis must have
them too (docs/shards.md, "One Redis and its settings"; ``deploy/README.md``). Each is a plain
``redis.conf`` directive, also settable with ``CONFIG SET``.
"""

from __future__ import annotations

__all__ = ["CLUSTER_SETTINGS", "SETTINGS", "server_args"]

SETTINGS: dict[str, str] = {
    # A full Redis must refuse writes, never evict: the receiver then answers
    # 503 with Retry-After and the sender posts again, whereas an evicted key
    # is a lost post, a forgotten event id (a repeat forwarded) or a delivery
    # never made.
    "maxmemory-policy": "noeviction",
    # A hash is a compact listpack while every value is at most this long, and
    # a table of separately allocated entries (three to four times the bytes)
    # from the first longer one. RQ's job hash holds a 68-byte ``data`` field,
    # and a delivery's body is its envelope: with Redis's default of 64, both
    # were tables for every delivery.
    "hash-max-listpack-value": "2048",
    # A stream (the callback log) is a chain of listpack nodes, each allocated
    # 4 KB up front by default: a node fits three 1 KB posts and wastes the
    # rest. Nodes of up to 16 KB (still at most 100 entries) waste far less;
    # measured on 1 KB posts: 1,039 bytes per entry instead of 1,379.
    "stream-node-max-bytes": "16384",
}


# Besides those, on each node of a Redis Cluster (docs/shards.md, "On a Redis Cluster"). By default a
# Cluster with a slot that has no master (between a master's failure and its replica's promotion, or
# for good when it had no replica) refuses every command on every slot (CLUSTERDOWN): every post of
# every instance would be refused, and every worker stopped, for the instances of one master. With
# this, only that master's slots refuse; the others' posts are taken and delivered.
CLUSTER_SETTINGS: dict[str, str] = {
    "cluster-require-full-coverage": "no",
}


def server_args() -> list[str]:
    """``redis-server`` command-line arguments for :data:`SETTINGS`."""
    args: list[str] = []
    for name, value in SETTINGS.items():
        args += [f"--{name}", value]
    return args
