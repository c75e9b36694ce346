"""``python -m tests.bench.shards [--shards N] [--rounds R] [--seconds S] [--short]``: one shard, N, a Cluster.

The cost of sharding, in one run: each round measures one shard, N shards and a Redis Cluster of
N masters (``cluster://``, its 16 virtual shards; the order turned every round), each on its own
``redis-server``s with the append-only file and ``appendfsync always`` (``--appendfsync
everysec``: the usual production choice), with one ``svcgw serve`` (two HTTP workers) and two
``svcgw worker`` processes of this checkout, and 100 instances placed as ``device/create``
places them.

1. **ingest at saturation**: wrk posts the benchmark's 84-byte post for ``--seconds`` at 64
   connections over the 100 receivers, no worker running;
2. **end to end**: the two workers drain what was stored to the sink's 100 destinations.

Figures per variant: posts acknowledged per second, posts answered otherwise (a 5xx, a refusal),
deliveries per second (middle 80 % of arrivals), and per shard: its instances, its Redis CPU
seconds over both steps, and its bytes once everything is delivered, each as a share of the
variant's total (on the Cluster: instances per virtual shard, CPU and bytes per master). For the
drain: the two workers' CPU per delivery from the first delivery on (their start left out), the
commands the Redis servers ran per delivery (``INFO commandstats``, scripts' own commands
included), and the workers' open files once drained, mostly their connections to destinations.
``--variants one,cluster`` measures only those (the targets of the others then have no figure).

On two cores the N ``redis-server``s share the cores with everything else, so N shards cannot be
faster here; what is measured is what sharding costs (the issue: N = 3 keeps at least 0.85 of one shard's
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
from redis.cluster import RedisCluster

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.shards.placement import shard_of_token
from svcgw.storage import layoutversion, serverconfig
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace
from tests.deploy.redis_fleet import RedisClusterFleet, register_placed, sharded_store
from tests.support import free_port

from . import verdict
from .pipeline import parse_rounds, ready, settled, without_wrk
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
    Target("cluster_refused", "cluster.refused", "==", 0, "posts not acknowledged at saturation, Cluster"),
    Target("ingest_cluster_vs_1", "ratios_cluster.ingest_per_s", ">=", 0.8,
           "posts acknowledged/s, Cluster / one Redis, same run",
           (Need("cluster.undelivered", "==", 0), Need("one.undelivered", "==", 0))),
    Target("e2e_cluster_vs_1", "ratios_cluster.deliveries_per_s", ">=", 0.8,
           "deliveries/s, Cluster / one Redis, same run",
           (Need("cluster.undelivered", "==", 0), Need("one.undelivered", "==", 0))),
]  # fmt: skip
VARIANTS = ("one", "n", "cluster")
CLUSTER_SHARDS = 16


@dataclass
class Rig:
    """What ``saturate_with_wrk`` posts through: the receivers, the server's address, a directory."""

    workdir: Path
    fast: list[Tenant] = field(default_factory=list)
    base: str = ""


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


@dataclass
class Redises:
    """The Redis processes of a variant, each with a blocking client, and where each shard's queue is."""

    clients: list[Any]  # one per redis-server (a Cluster's: one per master)
    queues: list[tuple[Any, Any]]  # (client, key names) of each shard
    setting: str  # SVCGW_REDIS_SHARDS
    stop: Any


def _plain(count: int, workdir: Path, appendfsync: str) -> Redises:
    for i in range(count):
        (workdir / f"shard{i}").mkdir()
    servers = [RedisServer(workdir / f"shard{i}", appendfsync).start() for i in range(count)]

    def stop() -> None:
        for server in servers:
            server.stop()

    clients = [server.client for server in servers]
    return Redises(clients, [(c, keys) for c in clients], " ".join(s.url for s in servers), stop)


def _cluster(masters: int, workdir: Path, appendfsync: str) -> Redises:
    fleet = RedisClusterFleet(workdir / "cluster", masters=masters, appendfsync=appendfsync,
                              extra=[*serverconfig.server_args(), "--maxclients", "10000"]).start()  # fmt: skip
    clients = [node.client() for node in fleet.nodes]
    seed = fleet.nodes[0]
    cluster = RedisCluster(host=seed.host, port=seed.port)
    names = [KeySpace(f"{{s{i}}}") for i in range(CLUSTER_SHARDS)]

    def stop() -> None:
        cluster.close()
        for client in clients:
            client.close()
        fleet.close()

    return Redises(clients, [(cluster, n) for n in names], fleet.setting, stop)


def measure(count: int, workdir: Path, seconds: float, appendfsync: str = "always", *,
            cluster: bool = False) -> dict[str, Any]:  # fmt: skip
    """Ingest at saturation, then the drain, on ``count`` shards of their own (or a Cluster of ``count`` masters)."""
    redis = (_cluster if cluster else _plain)(count, workdir, appendfsync)
    sink = Sink()
    roles: list[Role] = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
        env.update(SVCGW_REDIS_SHARDS=redis.setting, SVCGW_UPSTREAM_URL="http://127.0.0.1:9/",
                   SVCGW_STATE_DIR=str(workdir), SVCGW_ALLOW_PRIVATE_DESTINATIONS="127.0.0.0/8",
                   SVCGW_ENCRYPTION_KEYS=Fernet.generate_key().decode(), SVCGW_HTTP_WORKERS="2",
                   PYTHONUNBUFFERED="1")  # fmt: skip
        if cluster:
            env["SVCGW_CLUSTER_SHARDS"] = str(CLUSTER_SHARDS)
        settings = Settings.from_env(env)
        rig = Rig(workdir, register(settings, sink.listen("fast", INSTANCES)))
        placed = [sum(1 for t in rig.fast if _shard_of(t.token) == i) for i in range(len(redis.queues))]
        port = free_port()
        roles.append(Role(["serve"], dict(env, SVCGW_PORT=str(port)), workdir / "serve.log").start())
        rig.base = f"http://127.0.0.1:{port}"
        wait_until(lambda: ready(rig.base), 120, "svcgw serve")  # a loaded machine starts it slowly
        wait_for_listeners(roles[-1], port, 2)
        used0, cpu0 = [_used(c) for c in redis.clients], [_cpu(c) for c in redis.clients]
        posted = saturate_with_wrk(rig, seconds, 64, prefix=f"{'c' if cluster else 'n'}{count}-")
        queue, inflight = settings.queue_name, settings.queue_name
        stored = settled(lambda: sum(int(c.llen(n.rq.queue(queue))) for c, n in redis.queues))
        calls0 = sum(_calls(c) for c in redis.clients)
        sink.reset()
        roles += [Role(["worker"], env, workdir / f"worker-{n}.log").start() for n in range(2)]
        deadline = time.monotonic() + 180
        # The workers' CPU from their first delivery on: their start (imports, connections) left out.
        workers_cpu0 = None
        while (arrived := sink.count()) < stored and time.monotonic() < deadline:
            if workers_cpu0 is None and arrived:
                workers_cpu0 = sum(role.cpu_seconds() for role in roles[1:])
            time.sleep(0.1)
        wait_until(lambda: all(c.llen(n.rq.queue(queue)) == 0 and c.zcard(n.inflight(inflight)) == 0
                               for c, n in redis.queues), 60, "every shard's queue drained")  # fmt: skip
        arrivals = sink.arrivals()
        workers_cpu = sum(role.cpu_seconds() for role in roles[1:]) - (workers_cpu0 or 0.0)
        # Their open files once drained: mostly the connections to the destinations they opened.
        workers_fds = sum(_open_files(role) for role in roles[1:])
        calls = sum(_calls(c) for c in redis.clients) - calls0
        cpu = [_cpu(c) - c0 for c, c0 in zip(redis.clients, cpu0, strict=True)]
        used = [_used(c) - u for c, u in zip(redis.clients, used0, strict=True)]
    finally:
        for role in reversed(roles):
            role.stop()
        sink.stop()
        redis.stop()
    delivered = len({event_id for event_id, _ in arrivals})
    cpu_total, used_total = sum(cpu) or 1e-9, sum(used) or 1
    return {
        "shards": len(redis.queues), "redis_servers": len(redis.clients), "instances_per_shard": placed,
        "stored": stored, "delivered": delivered, "undelivered": stored - delivered,
        "ingest_per_s": posted["ok_per_s"], "refused": posted["failed"],
        "deliveries_per_s": round(rate_of([t for _, t in arrivals]), 1),
        "redis_cpu_s": [round(c, 2) for c in cpu], "redis_cpu_us_per_event": round(cpu_total / max(delivered, 1) * 1e6),
        "bytes_per_event": round(used_total / max(delivered, 1)),
        # The drain's cost beside Redis's: the workers' CPU, and the commands the masters ran, per delivery.
        "worker_cpu_us_per_event": round(workers_cpu / max(delivered, 1) * 1e6),
        "drain_commands_per_event": round(calls / max(delivered, 1), 2), "workers_open_files": workers_fds,
        "redis_cpu_share": [round(c / cpu_total, 3) for c in cpu],
        "bytes_share": [round(u / used_total, 3) for u in used],
    }  # fmt: skip


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _calls(client: Any) -> int:
    """Commands the server has run since it started (INFO commandstats)."""
    return sum(int(stat["calls"]) for stat in client.info("commandstats").values())


def _open_files(role: Role) -> int:
    try:
        return len(os.listdir(f"/proc/{role.proc.pid}/fd")) if role.proc is not None else 0
    except OSError:  # it exited
        return 0


def _used(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def _shard_of(token: str) -> int:
    return shard_of_token(token) or 0


def summarise(rounds: list[dict[str, dict[str, Any]]], count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"rounds": rounds}
    for name in VARIANTS:
        runs = [r[name] for r in rounds if name in r]
        if not runs:
            continue
        summary = {f: statistics.median(run[f] for run in runs) for f in
                   ("ingest_per_s", "deliveries_per_s", "redis_cpu_us_per_event", "bytes_per_event",
                    "worker_cpu_us_per_event", "drain_commands_per_event", "workers_open_files")}  # fmt: skip
        summary["undelivered"] = max(run["undelivered"] for run in runs)
        summary["refused"] = max(run["refused"] for run in runs)
        # The shares are per redis-server: N shards' N servers, the Cluster's N masters.
        summary["redis_cpu_share_max_vs_even"] = round(max(max(run["redis_cpu_share"]) for run in runs) * count, 2)
        summary["bytes_share_max_vs_even"] = round(max(max(run["bytes_share"]) for run in runs) * count, 2)
        figures[name] = summary
    for name, key in (("n", "ratios"), ("cluster", "ratios_cluster")):
        if name not in figures or "one" not in figures:
            continue
        figures[key] = {f: verdict.ratio(figures[name][f], figures["one"][f]) for f in
                        ("ingest_per_s", "deliveries_per_s", "redis_cpu_us_per_event", "bytes_per_event")}  # fmt: skip
    # One shard's shares are 1 by definition: only N's are judged.
    if "one" in figures:
        figures["one"]["redis_cpu_share_max_vs_even"] = figures["one"]["bytes_share_max_vs_even"] = 1.0
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.shards", description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="which to measure, comma-separated (one, n, cluster); the targets of those left out "
                             "have no figure")  # fmt: skip
    args, rounds, seconds = parse_rounds(parser, argv, rounds=2)
    if without_wrk():
        return 2
    started = time.monotonic()
    measured = []
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-shards-") as tmp:
        for n in range(rounds):
            variants = [("one", 1, False), ("n", args.shards, False), ("cluster", args.shards, True)]
            variants = [v for v in variants if v[0] in args.variants.split(",")]
            turned = variants[n % len(variants) :] + variants[: n % len(variants)]  # each variant first in its turn
            this = {}
            for name, count, cluster in turned:
                what = f"a Cluster of {count} masters" if cluster else f"{count} shard(s)"
                print(f"... round {n + 1} of {rounds}: {what}", file=sys.stderr, flush=True)
                path = Path(tmp) / f"{name}-{n}"
                path.mkdir()
                this[name] = measure(count, path, seconds, args.appendfsync, cluster=cluster)
            measured.append(this)
    figures = summarise(measured, args.shards)
    figures["setup"] = {"shards": args.shards, "appendfsync": args.appendfsync, "rounds": rounds, "seconds": seconds,
                        "instances": INSTANCES,
                        "mode": "short" if args.short else "full",
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    lines = [f"{name:>7}: " + ", ".join(f"{k} {v}" for k, v in figures[name].items()) for name in VARIANTS
             if name in figures]  # fmt: skip
    lines += [f"N/1: {figures.get('ratios')}", f"Cluster/1: {figures.get('ratios_cluster')}"]
    return verdict.report(figures, TARGETS, "\n".join(lines), short=args.short, out=None)


if __name__ == "__main__":
    sys.exit(main())
