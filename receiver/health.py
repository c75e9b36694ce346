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
of the shard's slot (svcgw.shards.connections.on_shard_server), so each shard is
its own answer.

A client connects on first use, and a Cluster client first learns the
Cluster's slots and commands from its seed nodes: on a loaded machine or
with a seed that does not answer, that took longer than :data:`READY_TIMEOUT`,
and the first ``/readyz`` called healthy shards unreachable. So the server
connects every shard's clients before it takes requests (:func:`connect_shards`,
from the app's lifespan), and ``/readyz`` measures the shards, not the
clients' setup.

A Redis whose settings can lose acknowledged data or break the service (an
eviction policy with ``maxmemory`` set, no persistence where
``SVCGW_REDIS_PERSISTENCE`` requires it, a server too old:
svcgw.storage.serverchecks) is warned about in the log at start
(:func:`check_redis_settings`), and makes ``/readyz`` ``"degraded"`` (still
200: the service answers, but should not be left so) with each such finding
under ``redis_settings``: the shard's index, the setting, and what it does.
The settings are read again at most every 30 s (svcgw.shards.serverfacts).

A shard that answers but holds deliveries a worker stranded (held without
ever finishing their attempt, then handed back: svcgw.delivery.stranded) and
that have not been attempted since makes the answer ``"status": "degraded"``
too, still 200, with ``stranded``: those shards' indexes. The key is there
only while some shard has such deliveries.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisClusterException, RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from svcgw.delivery import stranded
from svcgw.shards.clients import ShardRedis
from svcgw.shards.serverfacts import SettingsWatch, log_reports
from svcgw.storage.servers import on_shard_server

from .services import Services

__all__ = ["CONNECT_TIMEOUT", "READY_TIMEOUT", "check_redis_settings", "connect_shards", "healthz", "readyz"]

READY_TIMEOUT = 2.0
# How long the server's start waits for the shards' clients to connect: a shard that does not
# answer by then is connected on first use, and /readyz reports it meanwhile.
CONNECT_TIMEOUT = 10.0

log = logging.getLogger("svcgw")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    services: Services = request.app.state.services
    watch: SettingsWatch = request.app.state.redis_settings
    clients = services.shards
    states, reports = await asyncio.gather(
        asyncio.gather(*(_state(client) for client in clients)), watch.reports(READY_TIMEOUT)
    )
    answered = [ok for ok, _ in states]
    shards = [{"shard": index, "redis": "ok" if ok else "unreachable"} for index, ok in enumerate(answered)]
    unreachable = [index for index, ok in enumerate(answered) if not ok]
    held = [index for index, (_, count) in enumerate(states) if count]
    # Index, setting and effect only: the check is unauthenticated, and findings name no host.
    harmful = [
        {"shard": report.shard, "setting": finding.setting, "severity": finding.severity, "problem": finding.problem}
        for report in reports
        for finding in report.harmful
    ]
    document: dict[str, object] = {"status": "ok", "redis": "ok", "shards": shards, "unreachable": unreachable}
    if harmful:
        document.update(status="degraded", redis_settings=harmful)
    if held:
        document.update(status="degraded", stranded=held)
    if not unreachable:
        return JSONResponse(document)
    document.update(status="degraded" if answered[0] else "unavailable", redis="unreachable")
    return JSONResponse(document, status_code=200 if answered[0] else 503)


async def check_redis_settings(watch: SettingsWatch, timeout: float = READY_TIMEOUT) -> None:
    """Read every shard's settings once at start, log what is wrong, and keep it for ``/readyz``.

    Under ``/readyz``'s own deadline: a shard that does not answer costs the start no more than that,
    and is reported by ``/readyz`` anyway.
    """
    reports = await watch.reports(timeout)
    log_reports(reports, log)


async def connect_shards(services: Services, timeout: float = CONNECT_TIMEOUT) -> None:
    """Connect each shard's clients (a PING each, at once), so that no request pays for it; log those that fail."""
    pairs = list(zip(services.shards, services.text_shards, strict=True))
    answered = await asyncio.gather(*(_answers(client, timeout) for pair in pairs for client in pair))
    for index in range(len(pairs)):
        if not (answered[2 * index] and answered[2 * index + 1]):
            log.warning("shard %d did not answer at start; it is connected on first use", index, extra={"shard": index})


async def _state(shard: ShardRedis) -> tuple[bool, int]:
    """Whether the shard answers, and how many of its deliveries were stranded and not attempted since."""
    if not await _answers(shard):
        return False, 0
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            return True, await stranded.unresolved(shard.redis, shard.keys)
    except (RedisError, RedisClusterException, OSError, TimeoutError):
        return True, 0


async def _answers(shard: ShardRedis, timeout: float = READY_TIMEOUT) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await on_shard_server(shard.redis, shard.keys, "PING")
    except (RedisError, RedisClusterException, OSError, TimeoutError):
        return False
    return True
