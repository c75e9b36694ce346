"""Several hosts: two Redis shards on two hosts, two receivers and two workers on four others, sharing the work.

Each host is a network namespace; the sink is the test process, on the
bridge. The instances are placed over the two shards as ``device/create``
places them; every acknowledged event must reach the sink exactly once,
each instance's data must be on its shard's host, and the dead letters must
look the same from every host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import orjson
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, run
from tests.deploy.hosts import HostProcess, Hosts, HostSink
from tests.deploy.load import Load
from tests.deploy.redis_fleet import register_placed, sharded_store
from tests.support import wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

NAMES = ["redis", "redis2", "api1", "api2", "worker1", "worker2"]
SHARDS = ["redis", "redis2"]  # the hosts of shard 0 and shard 1
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
        {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"},
        SVCGW_REDIS_SHARDS=" ".join(f"redis://{hosts.addresses[shard]}:6379/0" for shard in SHARDS),
        SVCGW_HOST=address,
        SVCGW_PORT="8080",
        SVCGW_PUBLIC_URL=f"http://{address}:8080",
        SVCGW_ALLOW_PRIVATE_DESTINATIONS=str(hosts.subnet),
        SVCGW_STATE_DIR=str(state / host),
    )


def deliver_through_both(sink: HostSink, workers: list[HostProcess], load: Load, count: int) -> set[str]:
    """Post ``count`` events through both receivers while both worker hosts run; each host delivers some.

    The acknowledged event ids: a post refused (503) is one its sender would post again, not one
    the service took on, so only the acknowledged ones must arrive.
    """
    mark = sink.received()
    with load:
        wait_for(lambda: load.acked() + load.refusals() == count, timeout=60, what=f"{count} posts answered")
        acknowledged = set(load.acknowledged)
        wait_for(lambda: acknowledged <= set(sink.counts()), timeout=90, interval=0.05,
                 what=f"{len(acknowledged)} deliveries")  # fmt: skip
    assert len(acknowledged) >= count * 0.99, f"{count - len(acknowledged)} of {count} posts refused"
    # Sharing the work means every worker host delivered some of it, not one host all of it.
    senders = sink.senders_since(mark)
    for worker in workers:
        assert senders[worker.address] > 0, f"{worker.host} delivered nothing of {count}: {dict(senders)}"
    return acknowledged


def test_receivers_and_workers_on_several_hosts_share_the_work(
    env: dict[str, str], hosts: Hosts, tmp_path: Path
) -> None:
    redis_servers = []
    for shard in SHARDS:
        (tmp_path / shard).mkdir()
        redis_servers.append(subprocess.Popen(
            [*hosts.exec_prefix(shard), "redis-server", "--bind", hosts.addresses[shard], "--port", "6379",
             "--dir", str(tmp_path / shard), "--appendonly", "yes", "--save", "", "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
    fast = HostSink(hosts.gateway).start()
    slow = HostSink(hosts.gateway, delay=0.1).start()
    failing = HostSink(hosts.gateway, status=500).start()
    processes: list[HostProcess] = []
    envs = {name: host_env(env, hosts, name, tmp_path) for name in NAMES}
    try:
        shards = [Redis(host=hosts.addresses[shard], port=6379, socket_connect_timeout=1) for shard in SHARDS]
        for shard, client in zip(SHARDS, shards, strict=True):
            wait_for(partial(_pings, client), timeout=10, what=f"Redis on {shard}")
        redis = shards[0]
        settings = Settings.from_env(envs["api1"])
        # Placed by fewest instances: fast on shard 0, slow on shard 1, failing on shard 0.
        tenants = {name: register(settings, sink.url) for name, sink in
                   (("fast", fast), ("slow", slow), ("failing", failing))}  # fmt: skip
        placed = {name: shard for name, (_, shard) in tenants.items()}
        assert placed == {"fast": 0, "slow": 1, "failing": 0}
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
            return [tenants[tenant][0].receiver_url(base) for base in bases]

        acknowledged = {}
        for sink, tenant, count in ((fast, "fast", FAST), (slow, "slow", SLOW)):
            load = Load(urls(tenant), prefix=tenant, limit=count, threads=4)
            acknowledged[tenant] = deliver_through_both(sink, workers, load, count)

        # Dead letters, made while both worker hosts run, seen from every host.
        with Load(urls("failing"), prefix="dead", limit=6) as dead:
            wait_for(lambda: dead.acked() == 6, timeout=20, what="posts to the failing destination")
        appid = tenants["failing"][0].appid
        wait_for(lambda: redis.scard(keys.dead_letters_by_appid(appid)) == 6, timeout=30, what="six dead letters")
        members = redis.smembers(keys.dead_letters_by_appid(appid))
        expected = {m.decode() if isinstance(m, bytes) else m for m in members}
        for name in NAMES:
            command = [sys.executable, "-m", "cli", "dlq", "list", "--appid", appid, "--json"]
            listed = orjson.loads(hosts.run(name, command, envs[name]))
            assert {letter["id"] for letter in listed} == expected, f"dead letters as seen from {name}"

        # Each instance's log is on its shard's host, and only there.
        for name, on in placed.items():
            logged = [bool(client.exists(keys.callback_log(tenants[name][0].appid))) for client in shards]
            assert logged == [n == on for n in range(len(SHARDS))], (name, logged)

        # Exactly once: every acknowledged event reached its sink, none twice.
        for sink, tenant in ((fast, "fast"), (slow, "slow")):
            counts = sink.counts()
            duplicates = sum(c - 1 for c in counts.values() if c > 1)
            assert acknowledged[tenant] <= set(counts) and duplicates == 0, tenant
        for client in shards:
            client.close()
    finally:
        for process in processes:
            process.stop()
        for server in redis_servers:
            server.terminate()
            server.wait(timeout=10)
        for sink in (fast, slow, failing):
            sink.stop()


def register(settings: Settings, url: str) -> tuple[Tenant, int]:
    """An account and one instance placed over the shards as ``device/create`` places it, its address set."""

    async def action() -> tuple[Tenant, int]:
        async with sharded_store(settings) as store:
            account = await store.create_account("hosts", devices=10)
            appid = "we_" + os.urandom(8).hex()[:15]
            token, shard = await register_placed(store, settings, account.id, appid)
            await store.set_callback(Scope(appid=appid), url)
            return Tenant(account.id, appid, token), shard

    return run(action())


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
