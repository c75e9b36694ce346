"""``python -m tests.bench.held_back [--jobs N] [--rounds N]``: what a job of a busy account costs a claim.

A job whose account has no free slot in the worker goes back to the scheduled registry without an
attempt. The read does that for any job (``queue_read.lua``: its owner read, its status set, its
id moved); the pop does it, unread, for the instances a read showed lately
(``svcgw.delivery.claim.Sightings``, ``queue_claim.lua``). This measures both on one Redis of its own:
``--jobs`` jobs of one account's 20 instances are claimed by a claimer that names the account busy
until none is left, once with the instances seen (held back at the pop) and once with nothing
seen (every job read), alternating, ``--rounds`` times each. Figures per job: the claimer's CPU
(this process), Redis's CPU and Redis commands; the medians are compared. The claimer's CPU is
what a worker spends, but for the engine's own bookkeeping, which is the same either way.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from cryptography.fernet import Fernet
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery.queue import DeliveryQueue
from svcgw.intake.ingest import Ingest
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault

from .services import RedisServer
from .verdict import ratio

INSTANCES = 20
CLAIM = 200


async def _fill(settings: Settings, redis: AsyncRedis, jobs: int) -> tuple[str, list[str]]:
    """An account of ``INSTANCES`` instances with ``jobs`` queued deliveries between them."""
    store = Store(
        AsyncRedis.from_url(settings.redis_url or "", decode_responses=True), TokenVault.from_settings(settings), keys
    )
    account = await store.create_account("held back", devices=INSTANCES)
    instances = []
    for n in range(INSTANCES):
        appid = f"we_held{n}"
        token = await store.register_instance(appid, account.id)
        await store.set_callback(Scope(appid=appid), f"http://127.0.0.1:{9000 + n}/hook")
        instances.append((appid, token))
    await store.redis.aclose()
    ingest = Ingest(redis, keys, settings)
    for n in range(jobs):
        appid, token = instances[n % INSTANCES]
        await ingest.accept(appid, token, b'{"event_type":"Msg","events":[{"id":"e%d"}]}' % n)
    await ingest.aclose()
    return account.id, [appid for appid, _ in instances]


async def _costs(redis: AsyncRedis) -> tuple[int, float]:
    commands, cpu = await redis.info("commandstats"), await redis.info("cpu")
    return sum(int(v["calls"]) for v in commands.values()), float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def _claim_all(
    settings: Settings, redis: AsyncRedis, account: str, appids: list[str], *, seen: bool
) -> dict[str, float]:
    queue = DeliveryQueue(redis, keys, settings.queue_name)
    sightings = queue._claimer.sightings
    if seen:
        for appid in appids:
            sightings.saw(appid, account, "")
    else:
        sightings.fresh = -1.0  # nothing read stays seen: every job is read, as before the pop held any back
    busy = {account: time.time() + 3600}
    commands, redis_cpu = await _costs(redis)
    started, popped = time.process_time(), 0
    while True:
        claimed = await queue.claim_batch(CLAIM, "bench", {}, busy)
        if claimed:
            raise RuntimeError("a job of the busy account was started")
        if not queue.popped:
            break
        popped += queue.popped
    cpu = time.process_time() - started
    commands_after, redis_cpu_after = await _costs(redis)
    return {
        "jobs": popped,
        "claimer_cpu_us_per_job": round(cpu / popped * 1e6, 2),
        "redis_cpu_us_per_job": round((redis_cpu_after - redis_cpu) / popped * 1e6, 2),
        "commands_per_job": round((commands_after - commands) / popped, 3),
    }


async def _requeue(settings: Settings, redis: AsyncRedis) -> None:
    """Everything held back back in the queue, queued, for the next measurement."""
    scheduled, queue = keys.rq.scheduled(settings.queue_name), keys.rq.queue(settings.queue_name)
    ids = await redis.zrange(scheduled, 0, -1)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(scheduled)
        pipe.rpush(queue, *ids)
        for delivery_id in ids:
            pipe.hset(keys.rq.job(delivery_id.decode()), "status", "queued")
        await pipe.execute()


async def run(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    settings = Settings.from_env({"SVCGW_REDIS_URL": url, "SVCGW_ENCRYPTION_KEYS": Fernet.generate_key().decode()})
    redis = AsyncRedis.from_url(url)
    try:
        account, appids = await _fill(settings, redis, jobs)
        measured: dict[str, list[dict[str, float]]] = {"read": [], "pop": []}
        for n in range(rounds):
            for way in ("read", "pop") if n % 2 == 0 else ("pop", "read"):
                figures = await _claim_all(settings, redis, account, appids, seen=way == "pop")
                if figures["jobs"] != jobs:
                    raise RuntimeError(f"{way}: {figures['jobs']} of {jobs} jobs popped")
                measured[way].append(figures)
                await _requeue(settings, redis)
    finally:
        await redis.aclose()
    medians = {
        way: {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "jobs"}
        for way, rows in measured.items()
    }
    return {
        "jobs": jobs,
        "rounds": rounds,
        "read": medians["read"],
        "pop": medians["pop"],
        "pop_vs_read": {k: ratio(medians["pop"][k], medians["read"][k]) for k in medians["read"]},
        "each": measured,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.held_back", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory), "everysec", appendonly=False).start()
        try:
            figures = asyncio.run(run(server.url, options.jobs, options.rounds))
        finally:
            server.stop()
    print(f"{'per job of a busy account':<28}{'read':>10}{'pop':>10}{'pop/read':>10}")
    for key in figures["read"]:
        print(f"{key:<28}{figures['read'][key]:>10}{figures['pop'][key]:>10}{figures['pop_vs_read'][key]!s:>10}")
    print(orjson.dumps(figures).decode(), flush=True)


if __name__ == "__main__":
    main()
