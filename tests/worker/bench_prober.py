"""What probing costs: Redis commands and CPU for N maintained instances.

Run: ``python -m tests.worker.bench_prober [--instances 10000] [--interval 60]
[--seconds 60] [--pool 32] [--redis-url URL]``. Without ``--redis-url`` it
starts a redis-server of its own (Redis's command counters are server-wide,
so a shared server mixes in other clients' work); with one, it FLUSHES that
database. It starts the capability-layer simulator in a child process, seeds
N healthy instances spread over one interval, runs one prober in this
process for ``--seconds`` and prints the figures, scaled to one minute. It
asserts nothing: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import tempfile
import time
from collections import Counter
from typing import Any

import httpx
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.upstream import Upstream
from tests.support import Process, free_port, wait_for
from worker.engine import loop_factory
from worker.prober import HTTP_TIMEOUT, POOL_SIZE, Claim, Prober


def _pings(redis: Redis) -> bool:
    try:
        return bool(redis.ping())
    except RedisError:
        return False


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_figures(redis: Redis) -> tuple[int, Counter[str], float]:
    stats = redis.info("commandstats")
    calls = Counter({name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()})
    cpu = redis.info("cpu")
    return int(redis.info("stats")["total_commands_processed"]), calls, cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def seed(redis: Redis, sim: httpx.Client, count: int, interval: float) -> list[str]:
    appids = [f"we_bench{n:010d}"[:18] for n in range(count)]
    for appid in appids:
        sim.post("/_sim/instances", json={"appid": appid, "connected": True}).raise_for_status()
    now = time.time()
    with redis.pipeline(transaction=False) as pipe:
        for appid in appids:
            due = now + random.uniform(0, interval)
            pipe.hset(
                keys.instance(appid),
                mapping={
                    "account": "acc_bench",
                    "maintained": "1",
                    "status": "online",
                    "since": repr(now - 3600),
                    "next_probe": repr(due),
                },
            )
            pipe.zadd(keys.probe_schedule, {appid: due})
        pipe.execute()
    return appids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pool", type=int, default=POOL_SIZE)
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()

    own_redis = None
    if args.redis_url is None:
        redis_port = free_port()
        own_redis = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            cwd=tempfile.gettempdir(),
        )
        args.redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis = Redis.from_url(args.redis_url, decode_responses=True)
    wait_for(lambda: _pings(redis), timeout=10, what="redis-server")
    redis.flushdb()
    port = free_port()
    sim_env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    sim_env["SVCGW_STATE_DIR"] = "/tmp"
    sim_process = Process(["sim", "--port", str(port)], sim_env, f"bench-sim-{port}").start()
    base = f"http://127.0.0.1:{port}"
    control = httpx.Client(base_url=base, trust_env=False, timeout=5)

    def ready() -> bool:
        try:
            return control.get("/_sim/instances").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, timeout=20, what="the simulator")
        print(f"seeding {args.instances} instances ...", flush=True)
        seed(redis, control, args.instances, args.interval)

        settings = Settings(redis_url=args.redis_url, upstream_url=base, probe_interval=args.interval)
        outcomes: Counter[str] = Counter()
        claims = reads = 0
        sim_pid = sim_process.proc.pid if sim_process.proc else 0

        async def measure() -> tuple[float, float, float]:
            nonlocal claims
            client = AsyncRedis.from_url(args.redis_url)
            upstream = Upstream(base, timeout=HTTP_TIMEOUT)
            prober = Prober(settings, client, keys, upstream, pool_size=args.pool)
            probe, claim = prober.probe, prober.claim

            async def counted(claimed: Claim) -> str:
                outcome = await probe(claimed)
                outcomes[outcome] += 1
                return outcome

            async def counted_claim(limit: int) -> Any:
                nonlocal claims, reads
                claims += 1
                if limit > 0:  # a claim that may take something reads the schedule first (ZRANGE)
                    reads += 1
                return await claim(limit)

            prober.probe = counted  # type: ignore[method-assign,assignment]
            prober.claim = counted_claim  # type: ignore[method-assign]
            stop = asyncio.Event()
            cpu0, sim_cpu0, wall0 = cpu_seconds(), child_cpu_seconds(sim_pid), time.monotonic()
            running = asyncio.create_task(prober.run(stop))
            await asyncio.sleep(args.seconds)
            stop.set()
            await running
            wall = time.monotonic() - wall0
            cpu, sim_cpu = cpu_seconds() - cpu0, child_cpu_seconds(sim_pid) - sim_cpu0
            await upstream.aclose()
            await client.aclose()
            return wall, cpu, sim_cpu

        commands0, calls0, redis_cpu0 = redis_figures(redis)
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            wall, cpu, sim_cpu = runner.run(measure())
        commands1, calls1, redis_cpu1 = redis_figures(redis)
    finally:
        control.close()
        sim_process.stop()
        if own_redis is not None:
            own_redis.terminate()
            own_redis.wait()

    per_minute = 60.0 / wall
    probes = sum(outcomes.values())
    # commandstats counts the commands scripts run as well; in a healthy
    # round the prober itself sends EVALSHA (claim, finish) and the claim's
    # read of the schedule (a ZRANGE, counted apart from the claim script's own).
    delta = calls1 - calls0
    delta.pop("info", None)
    delta["zrange"] -= reads
    sent = delta.pop("evalsha", 0) + delta.pop("eval", 0) + delta.pop("script|load", 0) + reads
    inside = sum(delta.values())
    print(f"\n{args.instances} instances, interval {args.interval:g}s, measured over {wall:.1f}s")
    print(f"probes: {probes} ({probes * per_minute:.0f}/min), outcomes {dict(outcomes)}")
    print(f"claim rounds: {claims} ({claims * per_minute:.0f}/min)")
    print(
        f"redis round trips (EVALSHA, the claims' ZRANGE): {sent} ({sent * per_minute:.0f}/min, "
        f"{sent / max(probes, 1):.2f} per probe)"
    )
    print(
        f"redis commands run inside the scripts: {inside} ({inside * per_minute:.0f}/min): "
        + ", ".join(f"{name} {count}" for name, count in delta.most_common())
    )
    print(f"total_commands_processed: {(commands1 - commands0) * per_minute:.0f}/min")
    print(f"redis cpu: {(redis_cpu1 - redis_cpu0) * per_minute:.2f} s/min")
    print(f"prober process cpu: {cpu * per_minute:.2f} s/min ({cpu / max(probes, 1) * 1e3:.2f} ms per probe)")
    print(f"simulator cpu (the capability layer's side): {sim_cpu * per_minute:.2f} s/min")


if __name__ == "__main__":
    main()
