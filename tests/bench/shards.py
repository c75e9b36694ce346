"""``python -m tests.bench.shards [--shards N] [--rounds R] [--seconds S] [--short]``: one shard against N.

The cost of sharding, in one run: each round measures one shard and N shards (the order swapped
every round), each on its own ``redis-server``s with the append-only file and ``appendfsync
always`` (``--appendfsync everysec``: the usual production choice), with one ``svcgw serve``
(two HTTP workers) and two ``svcgw worker`` processes of this checkout, and 100 instances placed
as ``device/create`` places them.

1. **ingest at saturation**: wrk posts the benchmark's 84-byte post for ``--seconds`` at 64
   connections over the 100 receivers, no worker running;
2. **end to end**: the two workers drain what was stored to the sink's 100 destinations.

Figures per variant: posts acknowledged per second, deliveries per second (middle 80 % of
arrivals), and per shard: its instances, its Redis CPU seconds over both steps, and its bytes
once everything is delivered, each as a share of the variant's total. On two cores the N
``redis-server``s share the cores with everything else, so N shards cannot be faster here; what
is measured is what sharding costs (the issue: N = 3 keeps at least 0.85 of one shard's
throughput) and whether the work spreads (each shard about 1/N of the Redis CPU and bytes).

The last line is one JSON object; before it, one verdict line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.shards.placement import shard_of_token
from svcgw.storage import layoutversion
from svcgw.storage.keys import PLAIN as keys
from tests.deploy.redis_fleet import register_placed, sharded_store
from tests.support import free_port

from . import verdict
from .pipeline import conclude, parse_rounds, ready, settled, without_wrk
from .scenarios import Tenant, rate_of, saturate_with_wrk
from .services import RedisServer, Role, Sink, wait_for_listeners, wait_until
from .verdict import Need, Target

INSTANCES = 100

TARGETS = [
    Target("ingest_n_vs_1", "ratios.ingest_per_s", ">=", 0.85, "posts acknowledged/s, N shards / one, same run",
           (Need("n.undelivered", "==", 0), Need("one.undelivered", "==", 0))),
    Target("e2e_n_vs_1", "ratios.deliveries_per_s", ">=", 0.85, "deliveries/s, N shards / one, same run",
           (Need("n.undelivered", "==", 0), Need("one.undelivered", "==", 0))),
    Target("cpu_share_max", "n.redis_cpu_share_max_vs_even", "<=", 1.3,
           "the busiest shard's share of Redis CPU / 1/N"),
    Target("bytes_share_max", "n.bytes_share_max_vs_even", "<=", 1.3,
           "the largest shard's share of Redis bytes / 1/N"),
]  # fmt: skip


@dataclass
class Rig:
    """What ``saturate_with_wrk`` posts through: the receivers, the server's address, a directory."""

    workdir: Path
    fast: list[Tenant] = field(default_factory=list)
    base: str = ""


def _cpu(server: RedisServer) -> float:
    info = server.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def register(settings: Settings, ports: list[int]) -> list[Tenant]:
    """One instance per destination, each placed as ``device/create`` places it, its address set."""

    async def run() -> list[Tenant]:
        async with sharded_store(settings) as store:
            shards = zip(store.copies.shards, store.copies.spaces, strict=True) if store.copies else ()
            for client, names in shards:
                # A new deployment: each shard marked before anything is stored.
                await layoutversion.mark_at_start(client, names)
            account = await store.create_account("bench-shards", devices=100000)
            tenants = []
            for port in ports:
                appid = "we_" + os.urandom(8).hex()[:15]
                token, _ = await register_placed(store, settings, account.id, appid)
                await store.set_callback(Scope(appid=appid), f"http://127.0.0.1:{port}/hook")
                tenants.append(Tenant(appid, token, port))
            return tenants

    return asyncio.run(run())


def measure(count: int, workdir: Path, seconds: float, appendfsync: str = "always") -> dict[str, Any]:
    """Ingest at saturation, then the drain, on ``count`` shards of their own."""
    for i in range(count):
        (workdir / f"shard{i}").mkdir()
    servers = [RedisServer(workdir / f"shard{i}", appendfsync).start() for i in range(count)]
    sink = Sink()
    roles: list[Role] = []
    try:
        urls = " ".join(server.url for server in servers)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
        env.update(SVCGW_REDIS_SHARDS=urls, SVCGW_UPSTREAM_URL="http://127.0.0.1:9/", SVCGW_STATE_DIR=str(workdir),
                   SVCGW_ALLOW_PRIVATE_DESTINATIONS="127.0.0.0/8", SVCGW_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
                   SVCGW_HTTP_WORKERS="2", PYTHONUNBUFFERED="1")  # fmt: skip
        settings = Settings.from_env(env)
        rig = Rig(workdir, register(settings, sink.listen("fast", INSTANCES)))
        placed = [sum(1 for t in rig.fast if _shard_of(t.token) == i) for i in range(count)]
        port = free_port()
        roles.append(Role(["serve"], dict(env, SVCGW_PORT=str(port)), workdir / "serve.log").start())
        rig.base = f"http://127.0.0.1:{port}"
        wait_until(lambda: ready(rig.base), 30, "svcgw serve")
        wait_for_listeners(roles[-1], port, 2)
        used0, cpu0 = [s.used_memory() for s in servers], [_cpu(s) for s in servers]
        posted = saturate_with_wrk(rig, seconds, 64, prefix=f"n{count}-")
        queue = keys.rq.queue(settings.queue_name)
        stored = settled(lambda: sum(int(s.client.llen(queue)) for s in servers))
        sink.reset()
        roles += [Role(["worker"], env, workdir / f"worker-{n}.log").start() for n in range(2)]
        deadline = time.monotonic() + 180
        while sink.count() < stored and time.monotonic() < deadline:
            time.sleep(0.1)
        inflight = keys.inflight(settings.queue_name)
        wait_until(lambda: all(s.client.llen(queue) == 0 and s.client.zcard(inflight) == 0 for s in servers), 60,
                   "every shard's queue drained")  # fmt: skip
        arrivals = sink.arrivals()
        cpu = [_cpu(s) - c for s, c in zip(servers, cpu0, strict=True)]
        used = [s.used_memory() - u for s, u in zip(servers, used0, strict=True)]
    finally:
        for role in reversed(roles):
            role.stop()
        sink.stop()
        for server in servers:
            server.stop()
    delivered = len({event_id for event_id, _ in arrivals})
    cpu_total, used_total = sum(cpu) or 1e-9, sum(used) or 1
    return {
        "shards": count, "instances_per_shard": placed, "stored": stored, "delivered": delivered,
        "undelivered": stored - delivered, "ingest_per_s": posted["ok_per_s"],
        "deliveries_per_s": round(rate_of([t for _, t in arrivals]), 1),
        "redis_cpu_s": [round(c, 2) for c in cpu], "redis_cpu_us_per_event": round(cpu_total / max(delivered, 1) * 1e6),
        "bytes_per_event": round(used_total / max(delivered, 1)),
        "redis_cpu_share": [round(c / cpu_total, 3) for c in cpu],
        "bytes_share": [round(u / used_total, 3) for u in used],
    }  # fmt: skip


def _shard_of(token: str) -> int:
    return shard_of_token(token) or 0


def summarise(rounds: list[dict[str, dict[str, Any]]], count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"rounds": rounds}
    for name in ("one", "n"):
        runs = [r[name] for r in rounds]
        summary = {f: statistics.median(run[f] for run in runs) for f in
                   ("ingest_per_s", "deliveries_per_s", "redis_cpu_us_per_event", "bytes_per_event")}  # fmt: skip
        summary["undelivered"] = max(run["undelivered"] for run in runs)
        summary["redis_cpu_share_max_vs_even"] = round(max(max(run["redis_cpu_share"]) for run in runs) * count, 2)
        summary["bytes_share_max_vs_even"] = round(max(max(run["bytes_share"]) for run in runs) * count, 2)
        figures[name] = summary
    figures["ratios"] = {f: verdict.ratio(figures["n"][f], figures["one"][f]) for f in
                         ("ingest_per_s", "deliveries_per_s", "redis_cpu_us_per_event", "bytes_per_event")}  # fmt: skip
    # One shard's shares are 1 by definition: only N's are judged.
    figures["one"]["redis_cpu_share_max_vs_even"] = figures["one"]["bytes_share_max_vs_even"] = 1.0
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.shards", description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always")
    args, rounds, seconds = parse_rounds(parser, argv, rounds=2)
    if without_wrk():
        return 2
    started = time.monotonic()
    measured = []
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-shards-") as tmp:
        for n in range(rounds):
            variants = [("one", 1), ("n", args.shards)]
            this = {}
            for name, count in variants if n % 2 == 0 else variants[::-1]:
                print(f"... round {n + 1} of {rounds}: {count} shard(s)", file=sys.stderr, flush=True)
                path = Path(tmp) / f"{name}-{n}"
                path.mkdir()
                this[name] = measure(count, path, seconds, args.appendfsync)
            measured.append(this)
    figures = summarise(measured, args.shards)
    figures["setup"] = {"shards": args.shards, "appendfsync": args.appendfsync, "rounds": rounds, "seconds": seconds,
                        "instances": INSTANCES,
                        "mode": "short" if args.short else "full",
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    for name in ("one", "n"):
        print(f"{name:>4}: " + ", ".join(f"{k} {v}" for k, v in figures[name].items()))
    print(f"N/1: {figures['ratios']}")
    return conclude(figures, verdict.judge(figures, TARGETS), short=args.short)


if __name__ == "__main__":
    sys.exit(main())
