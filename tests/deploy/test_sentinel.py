"""Redis behind Sentinel: the service follows a failover, and the durable mode loses no acknowledged event;
rq-dashboard reads a Sentinel shard, before and after a failover.

Debian's ``redis-server`` and ``redis-sentinel``: one primary, one replica
and three sentinels of the test's own on loopback ports. The primary is
killed with SIGKILL while events are being posted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from receiver.app import create_app
from svcgw.config.settings import Settings, SettingsError
from svcgw.registry.store import Scope
from svcgw.shards.connections import async_client, sync_client
from tests.conftest import Tenant, provision, run
from tests.deploy.load import Load, event_ids, missing
from tests.deploy.redis_fleet import sharded_store
from tests.deploy.redis_nodes import MASTER, SentinelCluster
from tests.support import Process, Sink, ThreadedServer, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    nodes = SentinelCluster(tmp_path / "redis").start()
    try:
        yield nodes
    finally:
        nodes.close()


def sentinel_env(env: dict[str, str], cluster: SentinelCluster, **extra: str) -> dict[str, str]:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    configured.update(SVCGW_REDIS_SENTINELS=cluster.addresses, SVCGW_REDIS_SENTINEL_MASTER=MASTER, **extra)
    return configured


def provision_on(cluster: SentinelCluster, env: dict[str, str], sink: Sink) -> Tenant:
    direct = Settings.from_env(dict(env, SVCGW_REDIS_URL=f"redis://{cluster.master.address}/0"))
    return provision(direct, url=sink.url)


def test_durable_mode_loses_no_acknowledged_event_when_the_primary_is_killed(
    env: dict[str, str], cluster: SentinelCluster, sink: Sink
) -> None:
    tenant = provision_on(cluster, env, sink)
    service_env = sentinel_env(env, cluster, SVCGW_REDIS_WAIT_REPLICAS="1", SVCGW_REDIS_WAIT_TIMEOUT="0.5")
    server, base = start_server(service_env)
    worker = Process(["worker"], service_env, "worker").start()
    try:
        with Load([tenant.receiver_url(base)], prefix="durable") as load:
            wait_for(lambda: load.acked() >= 300, timeout=30, what="load to build up")
            old = cluster.primary()
            assert old is not None
            cluster.master.kill()
            at_kill = load.acked()
            cluster.wait_for_failover(old)
            # The promoted primary has no replica until the old one returns: the
            # durable mode refuses (503) rather than acknowledge what one crash could lose.
            wait_for(lambda: load.refusals() > 0, timeout=15, what="posts to be refused without a replica")
            cluster.master.start()  # the sentinels turn it into a replica of the new primary
            wait_for(lambda: load.acked() >= at_kill + 300, timeout=45,
                     what="posts to be acknowledged again once the old primary is a replica")  # fmt: skip
        wait_for(missing(load.acknowledged, lambda: event_ids(sink.posts())), timeout=60, interval=0.2,
                 what=f"all {len(load.acknowledged)} acknowledged events to be delivered")  # fmt: skip
        repeats = sum(count - 1 for count in event_ids(sink.posts()).values())
        print(f"durable: {len(load.acknowledged)} acknowledged, {load.refused} refused, "
              f"{repeats} delivered more than once (at least once across a failover)")  # fmt: skip
        assert worker.alive() and server.alive()
    finally:
        worker.stop()
        server.stop()


def test_service_carries_on_after_failover_without_waiting_for_replicas(
    env: dict[str, str], cluster: SentinelCluster, sink: Sink
) -> None:
    tenant = provision_on(cluster, env, sink)
    service_env = sentinel_env(env, cluster)
    server, base = start_server(service_env)
    worker = Process(["worker"], service_env, "worker").start()
    try:
        with Load([tenant.receiver_url(base)], prefix="before") as before:
            wait_for(lambda: before.acked() >= 300, timeout=30, what="load to build up")
            old = cluster.primary()
            assert old is not None
            cluster.master.kill()
            cluster.wait_for_failover(old)
        # The limit counts posts, refused ones too: leave room for the refusals
        # of the moment the clients take to find the promoted primary.
        with Load([tenant.receiver_url(base)], prefix="after", limit=5000) as after:
            wait_for(lambda: after.acked() >= 300, timeout=30, what="posts to the promoted primary")
        wait_for(missing(after.acknowledged, lambda: event_ids(sink.posts())), timeout=30, interval=0.2,
                 what="the events posted after the failover to be delivered")  # fmt: skip
        # Leases of deliveries cut off by the failover run out before they are tried again.
        settled = time.monotonic() + 10
        while set(before.acknowledged) - set(event_ids(sink.posts())) and time.monotonic() < settled:
            time.sleep(0.2)
        lost = set(before.acknowledged) - set(event_ids(sink.posts()))
        # Without WAIT, what the replica had not yet received when the primary died
        # may be gone: this is the trade the durable mode exists for.
        print(f"without WAIT: {len(before.acknowledged)} acknowledged before the failover, {len(lost)} lost")
        assert worker.alive() and server.alive()
    finally:
        worker.stop()
        server.stop()


def test_durable_mode_refuses_what_no_replica_confirmed(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings)
    durable = dict(env, SVCGW_REDIS_WAIT_REPLICAS="1", SVCGW_REDIS_WAIT_TIMEOUT="0.05")
    server, base = start_server(durable)  # the test Redis has no replica
    try:
        answer = httpx.post(tenant.receiver_url(base), content=b'{"event_type":"Msg","events":[{"id":"w1"}]}')
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        unknown = httpx.post(base + "/svc/receiver/nobody/nothing", content=b'{"event_type":"Msg","events":[]}')
        assert unknown.status_code == 404
    finally:
        server.stop()


def test_sentinel_settings() -> None:
    settings = Settings.from_env(
        {
            "SVCGW_REDIS_SENTINELS": "10.0.0.1:26379, sentinel-b:26380,[::1]:26381",
            "SVCGW_REDIS_SENTINEL_MASTER": "events",
            "SVCGW_REDIS_SENTINEL_PASSWORD": "s3ntinel-pw",
            "SVCGW_REDIS_PASSWORD": "pr1mary-pw",
            "SVCGW_REDIS_DB": "2",
            "SVCGW_REDIS_WAIT_REPLICAS": "1",
        }
    )
    assert settings.redis_sentinels == (("10.0.0.1", 26379), ("sentinel-b", 26380), ("::1", 26381))
    assert settings.redis_sentinel_master == "events" and settings.redis_db == 2
    assert settings.redis_wait_replicas == 1 and settings.redis_wait_timeout == 1.0
    assert settings.redis_configured and "pw" not in repr(settings)
    assert Settings.from_env({}).redis_sentinel_master == "mymaster"
    assert not Settings.from_env({}).redis_configured


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"SVCGW_REDIS_SENTINELS": "host-without-port"}, "SVCGW_REDIS_SENTINELS"),
        ({"SVCGW_REDIS_SENTINELS": "h:0"}, "SVCGW_REDIS_SENTINELS"),
        ({"SVCGW_REDIS_SENTINELS": "h:1", "SVCGW_REDIS_URL": "redis://h:6379/0"}, "not both"),
        ({"SVCGW_REDIS_DB": "1", "SVCGW_REDIS_URL": "redis://h:6379/0"}, "SVCGW_REDIS_DB"),
        ({"SVCGW_REDIS_PASSWORD": "x"}, "SVCGW_REDIS_PASSWORD"),
        ({"SVCGW_REDIS_WAIT_REPLICAS": "-1"}, "SVCGW_REDIS_WAIT_REPLICAS"),
        ({"SVCGW_REDIS_WAIT_TIMEOUT": "soon"}, "SVCGW_REDIS_WAIT_TIMEOUT"),
    ],
)
def test_bad_sentinel_settings_name_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        Settings.from_env(environ)


def test_clients_through_sentinel_run_scripts_and_close_everything(cluster: SentinelCluster) -> None:
    import asyncio

    settings = Settings.from_env({"SVCGW_REDIS_SENTINELS": cluster.addresses})
    sync = sync_client(settings)
    try:
        incr = sync.register_script("return redis.call('INCR', KEYS[1])")
        assert incr(keys=["n"]) == 1 and sync.get("n") == b"1"
    finally:
        sync.close()

    async def through_async() -> object:
        client = async_client(settings, decode=True)
        try:
            incr = client.register_script("return redis.call('INCR', KEYS[1])")
            return await incr(keys=["n"])
        finally:
            await client.aclose()

    assert asyncio.run(through_async()) == 2


def test_the_dashboard_reads_a_sentinel_shard_and_follows_its_failover(
    env: dict[str, str], redis_url: str, cluster: SentinelCluster
) -> None:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    settings = Settings.from_env({
        **configured,
        "SVCGW_REDIS_SHARDS": f"{redis_url} sentinel://{cluster.addresses}/{MASTER}",
        "SVCGW_DASHBOARD_USER": "operator",
        "SVCGW_DASHBOARD_PASSWORD": "dashboard-pass-123",
    })  # fmt: skip
    tenant = run(_on_shard_one(settings))
    server = ThreadedServer(create_app(settings)).start()

    def queued(shard: int) -> list[int] | None:
        """The svcgw queue's count as the dashboard shows shard ``shard`` ([] without one); None: no answer."""
        answer = httpx.get(f"{server.base}/rq/{shard}/data/queues.json", auth=("operator", "dashboard-pass-123"),
                           timeout=10)  # fmt: skip
        if answer.status_code != 200:
            return None
        return [queue["count"] for queue in answer.json()["queues"] if queue["name"] == "svcgw"]

    try:
        for event in ("d1", "d2"):
            body = f'{{"event_type":"Msg","events":[{{"id":"{event}"}}]}}'.encode()
            assert httpx.post(tenant.receiver_url(server.base), content=body, timeout=10).status_code == 200
        assert queued(1) == [2] and queued(0) in ([], [0])  # the shard's own queue, through its sentinels
        page = httpx.get(f"{server.base}/rq/1/view", auth=("operator", "dashboard-pass-123"), timeout=10)
        assert page.status_code == 200 and "redis+sentinel://" in page.text

        replica = cluster.replica.client()
        wait_for(lambda: replica.llen("rq:queue:svcgw") == 2, what="the jobs on the replica")
        replica.close()
        old = cluster.primary()
        assert old is not None
        cluster.node_at(old).kill()
        new = cluster.wait_for_failover(old)
        assert new != old
        wait_for(lambda: queued(1) == [2], timeout=15, what="the dashboard reading the promoted primary")
    finally:
        server.stop()


async def _on_shard_one(settings: Settings) -> Tenant:
    async with sharded_store(settings) as store:
        account = await store.create_account("sentinel shard")
        await store.set_callback(Scope(account=account.id), "http://127.0.0.1:9/hook")
        return Tenant(account.id, "we_sentinel", await store.register_instance("we_sentinel", account.id, 1))
