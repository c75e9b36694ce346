"""Several hosts: Redis on one, two receivers and two workers on four others, all sharing the work.

Each host is a network namespace; the sink is the test process, on the
bridge. Every acknowledged event must reach the sink exactly once, and the
dead letters must look the same from every host.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import orjson
import pytest
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from tests.conftest import provision
from tests.deploy.hosts import HostProcess, Hosts, HostSink
from tests.deploy.load import Load
from tests.support import wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

NAMES = ["redis", "api1", "api2", "worker1", "worker2"]
FAST = 2000  # deliveries per throughput run to a sink that answers at once
SLOW = 600  # ... and to one that takes 100 ms


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    made = Hosts(NAMES)
    made.create()
    try:
        yield made
    finally:
        made.close()


def host_env(env: dict[str, str], hosts: Hosts, host: str, state: Path) -> dict[str, str]:
    address = hosts.addresses[host]
    (state / host).mkdir(parents=True, exist_ok=True)
    return dict(
        env,
        SVCGW_REDIS_URL=f"redis://{hosts.addresses['redis']}:6379/0",
        SVCGW_HOST=address,
        SVCGW_PORT="8080",
        SVCGW_PUBLIC_URL=f"http://{address}:8080",
        SVCGW_ALLOW_PRIVATE_DESTINATIONS=str(hosts.subnet),
        SVCGW_STATE_DIR=str(state / host),
    )


def throughput(hosts: Hosts, sink: HostSink, workers: list[HostProcess], load: Load, count: int) -> float:
    """Queue ``count`` deliveries with no worker running, then start ``workers`` and time the drain."""
    mark = sink.received()
    with load:
        wait_for(lambda: load.acked() == count, timeout=60, what=f"{count} posts")
    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: sink.received() - mark >= count, timeout=90, interval=0.05,
                 what=f"{count} deliveries with {len(workers)} worker host(s)")  # fmt: skip
    finally:
        for worker in workers:
            worker.stop()
    # Sharing the work means every worker host delivered some of it, not one host all of it.
    senders = sink.senders_since(mark)
    for worker in workers:
        assert senders[worker.address] > 0, f"{worker.host} delivered nothing of {count}: {dict(senders)}"
    return sink.rate_since(mark)


def test_receivers_and_workers_on_several_hosts_share_the_work(
    env: dict[str, str], hosts: Hosts, tmp_path: Path
) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    redis_server = subprocess.Popen(
        [*hosts.exec_prefix("redis"), "redis-server", "--bind", hosts.addresses["redis"], "--port", "6379",
         "--dir", str(redis_dir), "--appendonly", "yes", "--save", "", "--protected-mode", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    fast = HostSink(hosts.gateway).start()
    slow = HostSink(hosts.gateway, delay=0.1).start()
    failing = HostSink(hosts.gateway, status=500).start()
    processes: list[HostProcess] = []
    envs = {name: host_env(env, hosts, name, tmp_path) for name in NAMES}
    try:
        redis = Redis(host=hosts.addresses["redis"], port=6379, socket_connect_timeout=1)
        wait_for(lambda: _pings(redis), timeout=10, what="Redis on its host")
        settings = Settings.from_env(envs["api1"])
        tenants = {name: provision(settings, url=sink.url) for name, sink in
                   (("fast", fast), ("slow", slow), ("failing", failing))}  # fmt: skip
        for api in ("api1", "api2"):
            processes.append(HostProcess(hosts, api, ["serve"], envs[api], "serve").start())
        bases = [f"http://{hosts.addresses[api]}:8080" for api in ("api1", "api2")]
        for base in bases:
            wait_for(partial(_ready, base), timeout=20, what=f"the receiver at {base}")

        def urls(tenant: str) -> list[str]:
            return [tenants[tenant].receiver_url(base) for base in bases]

        def worker(host: str) -> HostProcess:
            process = HostProcess(hosts, host, ["worker"], envs[host], "worker")
            processes.append(process)
            return process

        figures = {}
        for sink, tenant, count in ((fast, "fast", FAST), (slow, "slow", SLOW)):
            one = throughput(hosts, sink, [worker("worker1")], Load(urls(tenant), prefix=f"{tenant}1", limit=count,
                                                                      threads=4), count)  # fmt: skip
            two = throughput(hosts, sink, [worker("worker1"), worker("worker2")],
                             Load(urls(tenant), prefix=f"{tenant}2", limit=count, threads=4), count)  # fmt: skip
            figures[tenant] = (one, two)
        print(f"\nthroughput, deliveries/s, one worker host -> two: "
              f"fast sink {figures['fast'][0]:.0f} -> {figures['fast'][1]:.0f}; "
              f"100 ms sink {figures['slow'][0]:.0f} -> {figures['slow'][1]:.0f}")  # fmt: skip

        # Dead letters, made while both worker hosts run, seen from every host.
        running = [worker("worker1").start(), worker("worker2").start()]
        with Load(urls("failing"), prefix="dead", limit=6) as dead:
            wait_for(lambda: dead.acked() == 6, timeout=20, what="posts to the failing destination")
        appid = tenants["failing"].appid
        wait_for(lambda: redis.scard(keys.dead_letters_by_appid(appid)) == 6, timeout=30, what="six dead letters")
        members = redis.smembers(keys.dead_letters_by_appid(appid))
        expected = {m.decode() if isinstance(m, bytes) else m for m in members}
        for name in NAMES:
            command = [sys.executable, "-m", "cli", "dlq", "list", "--appid", appid, "--json"]
            listed = orjson.loads(hosts.run(name, command, envs[name]))
            assert {letter["id"] for letter in listed} == expected, f"dead letters as seen from {name}"
        for process in running:
            process.stop()

        for sink, tenant, count in ((fast, "fast", FAST), (slow, "slow", SLOW)):
            counts = sink.counts()
            posted = {f"{tenant}{n}-{i}" for n in (1, 2) for i in range(count)}
            duplicates = sum(c - 1 for c in counts.values() if c > 1)
            print(f"{tenant}: {len(posted)} posted, {len(posted & set(counts))} delivered, {duplicates} duplicates")
            assert set(counts) == posted and duplicates == 0
        redis.close()
    finally:
        for process in processes:
            process.stop()
        redis_server.terminate()
        redis_server.wait(timeout=10)
        for sink in (fast, slow, failing):
            sink.stop()


def _pings(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _ready(base: str) -> bool:
    import httpx

    try:
        return httpx.get(base + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
