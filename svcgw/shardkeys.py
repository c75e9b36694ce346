"""Key names of the shards themselves.

An instance's keys are named as on one Redis (svcgw.keys) on whichever shard holds it: on
separate deployments each has its own keyspace, and on a Redis Cluster each virtual shard's
client puts the shard's hash tag ``{s<i>}`` in front of every key (svcgw.clusterspace), so the
names here are the same on every kind of shard.
"""

from __future__ import annotations

__all__ = ["SHARD_INSTANCES"]

# Hash on shard 0: field = a shard's index, value = instances placed there since shards were counted.
# Written with the instance's registration (svcgw.instancestore), read by placement in the same
# round trip as the owner check; instances older than the count are shard 0's (svcgw.shards.instance_counts).
SHARD_INSTANCES = "svcgw:shards:instances"

