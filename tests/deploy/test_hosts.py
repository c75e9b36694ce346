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
FAST = 800  # deliveries to a sink that answers at once
SLOW = 300  # ... and to one that takes 100 ms


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


def deliver_through_both(sink: HostSink, workers: list[HostProcess], load: Load, count: int) -> None:
    """Post ``count`` events through both receivers while both worker hosts run; each host delivers some."""
    mark = sink.received()
    with load:
        wait_for(lambda: load.acked() == count, timeout=60, what=f"{count} posts")
        wait_for(lambda: sink.received() - mark >= count, timeout=90, interval=0.05,
                 what=f"{count} deliveries")  # fmt: skip
    # Sharing the work means every worker host delivered some of it, not one host all of it.
    senders = sink.senders_since(mark)
    for worker in workers:
        assert senders[worker.address] > 0, f"{worker.host} delivered nothing of {count}: {dict(senders)}"


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
        workers = [HostProcess(hosts, host, ["worker"], envs[host], "worker").start()
                   for host in ("worker1", "worker2")]  # fmt: skip
        processes.extend(workers)
        bases = [f"http://{hosts.addresses[api]}:8080" for api in ("api1", "api2")]
        for base in bases:
            wait_for(partial(_ready, base), timeout=20, what=f"the receiver at {base}")
        # Both worker hosts listed in RQ's registry (worker.presence): both are claiming before any post.
        wait_for(lambda: redis.scard("rq:workers") == 2, timeout=30, what="both worker hosts registered")

        def urls(tenant: str) -> list[str]:
            return [tenants[tenant].receiver_url(base) for base in bases]

        for sink, tenant, count in ((fast, "fast", FAST), (slow, "slow", SLOW)):
            deliver_through_both(sink, workers, Load(urls(tenant), prefix=tenant, limit=count, threads=4), count)

        # Dead letters, made while both worker hosts run, seen from every host.
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

        # Exactly once: every acknowledged event reached its sink, none twice.
        for sink, tenant, count in ((fast, "fast", FAST), (slow, "slow", SLOW)):
            counts = sink.counts()
            duplicates = sum(c - 1 for c in counts.values() if c > 1)
            assert set(counts) == {f"{tenant}-{i}" for i in range(count)} and duplicates == 0, tenant
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
