"""What a command pointed at part of a sharded deployment says: that it sees one shard of several.

Shard 0 counts the instances placed on each shard (``svcgw:shards:instances``, a hash: shard
index to instances), written by every ``device/create``. A command whose settings name fewer
shards than that hash has counted (``SVCGW_REDIS_URL`` set to shard 0's Redis alone, say) would
show a part as if it were the whole: a listing of one shard's dead letters, "no posts" for an
instance of another. It says so on stderr first, with what to set instead. Likewise for a
``SVCGW_REDIS_URL`` naming a node of a Redis Cluster, whose keys carry the virtual shards' tags.

The passwords of the other shards are nowhere in Redis, so the command cannot reach them by
itself: the operator sets ``SVCGW_REDIS_SHARDS`` (and ``SVCGW_CLUSTER_SHARDS``) as the service
has them, which ``svcgw up --demo`` prints. A Redis that does not answer within
:data:`LOOK_SECONDS` is left for the command to report.
"""

from __future__ import annotations

import asyncio
from typing import Any

from svcgw.config.settings import Settings
from svcgw.errors import STORAGE_ERRORS
from svcgw.storage.keys import KeySpace

__all__ = ["LOOK_SECONDS", "partial_view"]

LOOK_SECONDS = 2.0  # at most this long spent looking, before the command's own work


async def partial_view(redis: Any, keys: KeySpace, settings: Settings) -> str | None:
    """What to tell the operator when ``settings`` name part of the deployment shard 0 (``redis``) belongs to."""
    layout = settings.shard_layout
    named = len(layout.shards)
    try:
        # A shard 0 that does not answer is the command's to report: this must not double its wait.
        async with asyncio.timeout(LOOK_SECONDS), redis.pipeline(transaction=False) as pipe:
            pipe.hkeys(keys.shard_instances)
            if not layout.cluster:
                pipe.info("cluster")
            answers = await pipe.execute(raise_on_error=False)
    except STORAGE_ERRORS:
        return None
    except TimeoutError:
        return None
    counted, info = answers[0], answers[1] if len(answers) > 1 else {}
    if isinstance(info, dict) and int(info.get("cluster_enabled", 0) or 0) == 1:
        return (
            "this Redis is a node of a Redis Cluster, whose keys carry its virtual shards' tags: set "
            "SVCGW_REDIS_SHARDS=cluster://<host:port,...> and SVCGW_CLUSTER_SHARDS as the service has them "
            "(not SVCGW_REDIS_URL) to see the deployment"
        )
    if isinstance(counted, BaseException):
        return None
    indexes = [int(_text(field)) for field in counted if _text(field).isdigit()]
    total = max(indexes, default=-1) + 1
    if total <= named:
        return None
    seen = "shard 0 alone" if named == 1 else f"shards 0 to {named - 1}"
    return (
        f"these settings name {seen} of a deployment whose instances are placed on at least {total} shards: "
        f"instances, deliveries, logs and dead letters of shards {named} to {total - 1} are not shown here. "
        "Set SVCGW_REDIS_SHARDS as the service has it (svcgw up --demo prints it) to see every shard"
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
