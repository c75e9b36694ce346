"""Connection floods: a client's calls while 16 addresses hold the server's connections, against the same alone.

``python -m tests.bench.connection_floods [--short] [--out FILE]`` starts its own redis-server, the
capability-layer simulator (``svcgw sim``) and ``svcgw serve`` (one process, its cap
``SVCGW_HTTP_LIMIT_CONCURRENCY``: 2,048, 256 in ``--short``), all on loopback. A client at
127.0.0.3 calls ``/healthz``, a gateway operation (``device/create``) and a receiver post in turn,
in rounds alternating with and without a flood (``tests/connflood.py``: 8 addresses trickling
sign-in bodies at the minimum rate, 8 holding keep-alive connections that ping every 4 s, each
trying to keep its share and 8 more open, in a process of their own). Figures, per round and
as medians:

* ``ok_share``: the client's calls answered 2xx within a second, of all it made;
* ``p50_ms``, ``p99_ms``: their latency, answered or not;
* ``flood_held``: the most connections the flood held open at once (its own count), and how many it
  opened in all.

The targets (:data:`TARGETS`) are same-run ratios: the share answered within a second with the flood
over the share without (the audit's target: 95 %), and the p99 with the flood over the p99 without.
A round whose flood did not hold more connections than the cap proves nothing, and the target is
then not met.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.connflood import Calls, FloodProcess, other_client
from tests.support import free_port

from . import verdict
from .services import RedisServer, Role, compile_sources, start_server, wait_until
from .verdict import Need, Target, ratio

ADDRESSES = 16

TARGETS = [
    Target("flood_ok_vs_alone", "connection_floods.ok_vs_alone", ">=", 0.95,
           "share of a client's calls answered 2xx within 1 s while 16 addresses hold slow bodies and idle "
           "keep-alives past the cap / the same share without them, median of the rounds",
           (Need("connection_floods.flood_held_most", ">", "connection_floods.cap"),
            Need("connection_floods.alone_calls", ">", 0), Need("connection_floods.flood_calls", ">", 0))),
    Target("flood_p99_vs_alone", "connection_floods.p99_vs_alone", "<=", 10,
           "p99 of the client's calls with the flood / without, median of the rounds",
           (Need("connection_floods.flood_held_most", ">", "connection_floods.cap"),)),
]  # fmt: skip


@dataclass(frozen=True)
class FloodPlan:
    short: bool
    rounds: int = 3

    @property
    def cap(self) -> int:
        return 256 if self.short else 2048

    @property
    def wanted(self) -> int:
        """Connections each flooding address keeps trying to hold: its share and eight more."""
        return self.cap // 8 + 8

    @property
    def seconds(self) -> float:
        """How long the client calls in each half of a round."""
        return 4.0 if self.short else 15.0

    @property
    def round_count(self) -> int:
        return 1 if self.short else self.rounds


def _summary(calls: Calls) -> dict[str, Any]:
    took = sorted(t for _, _, t in calls.outcomes)
    count = len(took)
    return {
        "calls": count,
        "ok_share": round(calls.good(1.0) / count, 4) if count else None,
        "p50_ms": round(took[count // 2] * 1000, 1) if count else None,
        "p99_ms": round(took[min(count - 1, int(count * 0.99))] * 1000, 1) if count else None,
        "why": sorted(set(calls.why))[:10],
    }


def _median(values: list[Any]) -> Any:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(statistics.median(numbers), 4) if numbers else None


def run(plan: FloodPlan, workdir: Path) -> dict[str, Any]:
    compile_sources()
    redis = RedisServer(workdir, "everysec", appendonly=False).start()
    sim_port = free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    base_env.update(SVCGW_STATE_DIR=str(workdir), PYTHONUNBUFFERED="1")
    sim = Role(["sim", "--port", str(sim_port)], base_env, workdir / "sim.log").start()
    server: Role | None = None
    try:
        env = dict(
            base_env,
            SVCGW_REDIS_URL=redis.url,
            SVCGW_UPSTREAM_URL=f"http://127.0.0.1:{sim_port}",
            SVCGW_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
            SVCGW_HTTP_LIMIT_CONCURRENCY=str(plan.cap),
            SVCGW_RATE_LIMIT="100000000/minute",
        )
        wait_until(lambda: _answers(f"http://127.0.0.1:{sim_port}/_sim/instances"), 30, "the simulator")
        settings = Settings.from_env(env)
        key, receiver = asyncio.run(_provision(redis.url, settings))
        server, base = start_server(env, workdir / "serve.log")
        port = int(base.rsplit(":", 1)[1])
        rounds: list[dict[str, Any]] = []
        for _ in range(plan.round_count):
            alone = Calls()
            asyncio.run(other_client(base, key, receiver, plan.seconds, alone, most=100_000))
            flood = FloodProcess(port, ADDRESSES, plan.wanted)
            try:
                time.sleep(3.0)  # the flood reaches the cap
                flooded = Calls()
                asyncio.run(other_client(base, key, receiver, plan.seconds, flooded, most=100_000))
            finally:
                held = flood.end()
            rounds.append({"alone": _summary(alone), "flood": _summary(flooded), "flood_held": held})
            time.sleep(2.0)  # the flood's connections closed before the next round
    finally:
        if server is not None:
            server.stop()
        sim.stop()
        redis.stop()
    ok_ratios = [ratio(r["flood"]["ok_share"], r["alone"]["ok_share"]) for r in rounds]
    p99_ratios = [ratio(r["flood"]["p99_ms"], r["alone"]["p99_ms"]) for r in rounds]
    return {
        "cap": plan.cap,
        "addresses": ADDRESSES,
        "wanted_per_address": plan.wanted,
        "seconds_per_half": plan.seconds,
        "rounds": rounds,
        "ok_vs_alone": _median(ok_ratios),
        "p99_vs_alone": _median(p99_ratios),
        "alone_calls": min(r["alone"]["calls"] for r in rounds),
        "flood_calls": min(r["flood"]["calls"] for r in rounds),
        "flood_held_most": min(r["flood_held"].get("most", 0) for r in rounds),
    }


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


async def _provision(url: str, settings: Settings) -> tuple[str, str]:
    """An account's API key and a receiver path of one of its instances."""
    client = AsyncRedis.from_url(url, decode_responses=True)
    try:
        store = Store(client, TokenVault.from_settings(settings), keys)
        account = await store.create_account("connection floods", devices=1_000_000)
        key = (await store.create_key(account.id))[1]
        appid = "we_" + os.urandom(8).hex()[:15]
        token = await store.register_instance(appid, account.id)
        return key, f"/svc/receiver/{appid}/{token}"
    finally:
        await client.aclose()


def table(figures: dict[str, Any]) -> str:
    lines = [f"cap {figures['cap']}, {figures['addresses']} addresses x {figures['wanted_per_address']} connections"]
    for number, r in enumerate(figures["rounds"], 1):
        lines.append(
            f"round {number}: alone {r['alone']['ok_share']} ok, p50 {r['alone']['p50_ms']} ms, p99 "
            f"{r['alone']['p99_ms']} ms ({r['alone']['calls']} calls); flood {r['flood']['ok_share']} ok, p50 "
            f"{r['flood']['p50_ms']} ms, p99 {r['flood']['p99_ms']} ms ({r['flood']['calls']} calls); the flood "
            f"held up to {r['flood_held'].get('most')} at once, {r['flood_held'].get('opened')} opened in all"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.connection_floods", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--short", action="store_true", help="one short round at a cap of 256 (smoke test)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    plan = FloodPlan(short=args.short, rounds=args.rounds)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-floods-") as tmp:
        figures = {"connection_floods": run(plan, Path(tmp))}
    figures["connection_floods"]["setup"] = {
        "mode": "short" if args.short else "full",
        "cores": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    return verdict.report(figures, TARGETS, table(figures["connection_floods"]), short=args.short, out=args.out)


if __name__ == "__main__":
    sys.exit(main())
