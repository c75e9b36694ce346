"""Gateway calls per second and latency, against the capability layer straight, in one run.

Run: ``python -m tests.bench.gateway_upstream [--tree DIR ...] [--requests 3000]
[--rounds 3] [--concurrency 50 1]``. Starts its own redis-server, ``svcgw sim``
and one ``svcgw serve`` per ``--tree`` (a checkout of this repository, run
with that tree first on the import path: compare two versions of the gateway
in the same run; default: this checkout), all on loopback. One account, one
connected instance; every request is ``POST /svc/api/user/getProfile``. Each
round sends ``--requests`` requests at each concurrency to the simulator
straight (the reference) and to each gateway, interleaved; prints requests
per second and p50/p99 latency of every round. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from redis import Redis
from redis.exceptions import RedisError

from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from tests.conftest import with_store
from tests.support import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
APPID = "we_benchgateway01"


def answering(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def pings(url: str) -> bool:
    try:
        return bool(Redis.from_url(url).ping())
    except RedisError:
        return False


def start(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", *args], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT
        )


async def load(url: str, body: bytes, headers: dict[str, str], count: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    failed = 0
    left = iter(range(count))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:

        async def client() -> None:
            nonlocal failed
            for _ in left:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                latencies.append(time.perf_counter() - started)
                failed += response.status != 200 or b'"code":0' not in answer.replace(b" ", b"")

        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(concurrency))), timeout=120)
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "per_s": count / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "failed": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[50, 1])
    args = parser.parse_args()
    trees: list[Path] = args.tree or [ROOT]
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    children: list[subprocess.Popen[bytes]] = []
    try:
        redis_port = free_port()
        children.append(
            subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
                cwd=workdir,
            )
        )
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        wait_for(lambda: pings(redis_url), timeout=10, what="redis-server")
        sim = f"http://127.0.0.1:{free_port()}"
        env = dict(base_env, SVCGW_STATE_DIR=str(workdir))
        children.append(start(["sim", "--port", sim.rsplit(":", 1)[1]], env, ROOT, workdir / "sim.log"))
        wait_for(lambda: answering(sim + "/_sim/instances"), timeout=20, what="the simulator")
        httpx.post(sim + "/_sim/instances", json={"appid": APPID, "connected": True}, trust_env=False)

        settings = Settings(redis_url=redis_url)

        async def tenant(store: Store) -> str:
            account = await store.create_account("bench", devices=10)
            _, key = await store.create_key(account.id)
            await store.register_instance(APPID, account.id)
            return key

        key: str = with_store(settings, tenant)
        body = b'{"appid":"' + APPID.encode() + b'"}'
        json_headers = {"Content-Type": "application/json"}
        targets: list[tuple[str, str, dict[str, str]]] = [("simulator", sim, json_headers)]
        for number, tree in enumerate(trees):
            port = free_port()
            server_env = dict(
                env,
                PYTHONPATH=str(tree),
                SVCGW_REDIS_URL=redis_url,
                SVCGW_UPSTREAM_URL=sim,
                SVCGW_PORT=str(port),
                SVCGW_RATE_LIMIT="100000000/minute",
            )
            children.append(start(["serve"], server_env, tree, workdir / f"serve-{number}.log"))
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda base=base: answering(base + "/readyz"), timeout=30, what=f"the gateway from {tree}")
            targets.append((f"gateway {tree}", base, dict(json_headers, **{"Svc-Key": key})))

        figures: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            for concurrency in args.concurrency:
                count = args.requests if concurrency > 1 else max(args.requests // 5, 100)
                for name, base, headers in targets:
                    url = base + "/svc/api/user/getProfile"
                    result = asyncio.run(load(url, body, headers, count, concurrency))
                    figures.setdefault((name, concurrency), []).append(result)
                    print(
                        f"round {round_ + 1} c={concurrency:<3} {name:<60} {result['per_s']:7.0f}/s "
                        f"p50 {result['p50_ms']:6.2f} ms p99 {result['p99_ms']:6.2f} ms failed {result['failed']}",
                        flush=True,
                    )
        print()
        for (name, concurrency), results in figures.items():
            rates = sorted(r["per_s"] for r in results)
            p50s = sorted(r["p50_ms"] for r in results)
            p99s = sorted(r["p99_ms"] for r in results)
            print(
                f"c={concurrency:<3} {name:<60} {rates[len(rates) // 2]:6.0f}/s ({rates[0]:.0f}-{rates[-1]:.0f}) "
                f"p50 {p50s[len(p50s) // 2]:.2f} ms p99 {p99s[len(p99s) // 2]:.2f} ms"
            )
    finally:
        for child in reversed(children):
            child.terminate()
            child.wait(20)


if __name__ == "__main__":
    main()
