"""Key names of the shards: kept apart from :mod:`svcgw.keys` until the key layout change lands.

On separate deployments an instance's keys keep their ``{<appid>}`` tag
(docs/redis-layout.md) and a deployment's own keys (the queue, RQ's
registries) stay as they are: each deployment has its own. On one Redis
Cluster a shard is the hash tag ``{s<i>}`` (:attr:`svcgw.shards.Shard.tag`):
an instance of shard ``i`` carries ``{s<i>}`` where it would carry
``{<appid>}`` (``svcgw:log:{s3}<appid>``), and the shard's queue is named
with it (``rq:queue:svcgw{s3}``; RQ allows any queue name), so that every
key a script of that shard touches hashes to one slot.
"""

from __future__ import annotations

from .shards import Shard

__all__ = ["SHARD_INSTANCES", "queue"]

# Hash on shard 0: field = a shard's index, value = instances placed there since shards were counted.
# Written with the instance's registration (svcgw.instancestore), read by placement in the same
# round trip as the owner check; instances older than the count are shard 0's (svcgw.shards.instance_counts).
SHARD_INSTANCES = "svcgw:shards:instances"


def queue(queue_name: str, shard: Shard) -> str:
    """RQ's queue list of ``queue_name`` on ``shard`` (``rq:queue:<name>``, tagged on a Cluster)."""
    return f"rq:queue:{queue_name}{shard.tag}"
