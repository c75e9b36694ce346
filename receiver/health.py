"""The health checks: ``/healthz``, the process answers; ``/readyz``, it can serve: shard 0 answers.

``/readyz`` pings every shard at once, each under :data:`READY_TIMEOUT`
(less than the 3 s the container and Kubernetes probes wait, so a shard
whose host does not answer at all is reported, not waited for). Ready means
shard 0 answers: it holds the accounts, keys and the instance registry that
every gateway call reads, while a receiver post needs only its own shard.
So one other shard down does not take every server out of rotation (which
would stop the other shards' traffic too): the answer is 200 with
``"status": "degraded"``, and 503 only when shard 0 does not answer. The
body says which shards did not (``unreachable``), by index only: the check
is unauthenticated, and a shard's name carries its host (``svcgw shards``
names them). With one shard the body is the one of before, with ``shards``
and ``unreachable`` added. On a Cluster each shard's PING goes to the master
of the shard's slot (svcgw.connections.on_shard_server), so each shard is
its own answer.
"""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisClusterException, RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from svcgw.connections import on_shard_server
from svcgw.shardclients import ShardRedis

from .services import Services

__all__ = ["READY_TIMEOUT", "healthz", "readyz"]

READY_TIMEOUT = 2.0


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    services: Services = request.app.state.services
    clients = services.shards
    answered = await asyncio.gather(*(_answers(client) for client in clients))
    shards = [{"shard": index, "redis": "ok" if ok else "unreachable"} for index, ok in enumerate(answered)]
    unreachable = [index for index, ok in enumerate(answered) if not ok]
    if not unreachable:
        return JSONResponse({"status": "ok", "redis": "ok", "shards": shards, "unreachable": []})
    status = "degraded" if answered[0] else "unavailable"
    document = {"status": status, "redis": "unreachable", "shards": shards, "unreachable": unreachable}
    return JSONResponse(document, status_code=200 if answered[0] else 503)


async def _answers(shard: ShardRedis) -> bool:
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            await on_shard_server(shard.redis, shard.keys, "PING")
    except (RedisError, RedisClusterException, OSError, TimeoutError):
        return False
    return True
