"""The service on a real local Redis Cluster: three masters, a replica each, sixteen virtual shards.

The Cluster is started as the Sentinel test starts its servers (``--cluster-enabled yes``, joined
with ``redis-cli --cluster create``). On it, with real ``svcgw serve`` and ``svcgw worker``
processes and the capability-layer simulator:

* the gateway places new instances over the sixteen hash tags (``device/create``), and each
  instance's keys live in its tag's slot, on the master that holds it;
* every event posted to every instance is delivered once; the operator's commands read every
  shard; dead letters of several shards are replayed by one command;
* liveness: a logged-in, started instance is probed on its shard, reported offline when its
  reconnect fails and recovered when it heals;
* a master's failover (``CLUSTER FAILOVER`` on its replica) while posts arrive loses no
  acknowledged event.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.registry.store import Scope
from svcgw.shards.placement import shard_of_token
from svcgw.storage.keys import KeySpace
from tests.cli.commands import ok
from tests.conftest import run
from tests.deploy.load import Load
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, sharded_store
from tests.receiver.gateway.stack import Stack, sim, start_stack  # noqa: F401 (sim: a fixture)
from tests.support import Process, Received, Sink, ThreadedServer, wait_for
from worker.prober import PROBE_READ

pytestmark = pytest.mark.slow

SHARDS = 16
DEVICES = 32


class Counting:
    """The sink's rule: events whose id starts ``dead-`` fail until ``heal``; every id answered 200 is counted."""

    def __init__(self) -> None:
        self.healed = threading.Event()
        self.delivered: Counter[str] = Counter()
        self.service: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, post: Received, earlier: list[Received]) -> tuple[int, float]:
        envelope = orjson.loads(post.body)
        if envelope["event_type"] in ("InstanceOffline", "InstanceRecovered"):
            event = {"appid": envelope["appid"], "type": envelope["event_type"], **envelope["events"][0]}
            with self.lock:
                self.service.append(event)
            return 200, 0.0
        ids = [str(event.get("id")) for event in envelope["events"]]
        if any(i.startswith("dead-") for i in ids) and not self.healed.is_set():
            return 500, 0.0
        with self.lock:
            self.delivered.update(ids)
        return 200, 0.0

    def count(self, prefix: str) -> Counter[str]:
        with self.lock:
            return Counter({k: v for k, v in self.delivered.items() if k.startswith(prefix)})

    def events(self, appid: str, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.service if e["appid"] == appid and e["type"] == kind]


cluster = cluster_fixture("module", replicas=1)


@pytest.fixture
def deployed(
    env: dict[str, str], sim: str, cluster: RedisClusterFleet  # noqa: F811 (the fixture)
) -> Iterator[tuple[Stack, dict[str, str], Sink, Counting]]:
    """``svcgw serve`` (the gateway, over the simulator) and two ``svcgw worker`` on the Cluster, a sink."""
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(
        SVCGW_REDIS_SHARDS=cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_RETRY_SCHEDULE="0.1,0.1,0.1",
        SVCGW_RATE_LIMIT="100000/minute",
        SVCGW_PROBE_INTERVAL="0.5",
        SVCGW_UPSTREAM_URL=sim,
    )
    counting = Counting()
    sink = Sink(rule=counting).start()
    stack = start_stack(service_env, sim, subprocess=True)
    workers = [Process(["worker"], service_env, name).start() for name in ("worker-a", "worker-b")]
    try:
        yield stack, service_env, sink, counting
    except BaseException:
        for process in [stack.process, *workers]:
            if isinstance(process, Process):
                print(f"--- {process.name}\n{process.output()[-3000:]}")
        raise
    finally:
        for worker in workers:
            worker.stop()
        stack.stop()
        sink.stop()
        for node in cluster.nodes:  # the next test starts from an empty Cluster
            client = node.client()
            try:
                if client.info("replication")["role"] == "master":
                    client.flushall()
            finally:
                client.close()


def test_the_first_readyz_after_start_finds_every_shard_of_a_healthy_cluster(
    env: dict[str, str], cluster: RedisClusterFleet, silent: int
) -> None:
    """Each virtual shard's client learns the Cluster from its seeds on first use: the server does it at start.

    A first seed that takes connections and never answers makes that learning outlast /readyz's
    deadline for about every other shard (redis-py tries the seeds in a random order), as a
    loaded machine did with healthy seeds.
    """
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    settings = Settings.from_env({
        **configured,
        "SVCGW_REDIS_SHARDS": f"cluster://127.0.0.1:{silent},{cluster.seeds}",
        "SVCGW_CLUSTER_SHARDS": str(SHARDS),
        "SVCGW_REDIS_TIMEOUT": "3",
    })  # fmt: skip
    server = ThreadedServer(create_app(settings)).start()
    try:
        first = httpx.get(f"{server.base}/readyz", timeout=30)
        assert first.status_code == 200 and first.json()["unreachable"] == [], first.text
        assert first.json()["status"] == "ok"
    finally:
        server.stop()


def _account(settings: Settings, sink_url: str) -> tuple[str, str]:
    async def action() -> tuple[str, str]:
        async with sharded_store(settings) as store:
            account = await store.create_account("cluster", devices=None)
            await store.set_callback(Scope(account=account.id), sink_url)  # copied to every shard
            _, key = await store.create_key(account.id)
            return account.id, key

    return run(action())


def _tokens(settings: Settings, appids: list[str]) -> dict[str, str]:
    async def action() -> dict[str, str]:
        async with sharded_store(settings) as store:
            return {appid: await store.receiver_token(appid) for appid in appids}

    return run(action())


def _devices(stack: Stack, key: str, count: int) -> list[str]:
    return [stack.create_device(key) for _ in range(count)]


def _placed(stack: Stack, service_env: dict[str, str], sink: Sink, count: int) -> tuple[str, dict[str, str]]:
    """An account with its default address at the sink, and ``count`` devices made through the gateway:
    the account's key, and each appid's receiver token (which names its shard)."""
    settings = Settings.from_env(service_env)
    _, key = _account(settings, sink.url)
    return key, _tokens(settings, _devices(stack, key, count))


def _slot_holder(cluster: RedisClusterFleet, shard: int) -> Any:
    """A blocking client of the master that holds shard ``shard``'s slot (``CLUSTER SLOTS``)."""
    first = cluster.nodes[0].client()
    try:
        slot = int(first.execute_command("CLUSTER", "KEYSLOT", f"{{s{shard}}}"))  # type: ignore[no-untyped-call]
        ranges = first.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
    finally:
        first.close()
    (port,) = [int(r[2][1]) for r in ranges if int(r[0]) <= slot <= int(r[1])]
    return next(node for node in cluster.nodes if node.port == port).client()


def test_the_gateway_places_instances_over_the_virtual_shards_and_each_event_arrives_once(
    deployed: tuple[Stack, dict[str, str], Sink, Counting], cluster: RedisClusterFleet
) -> None:
    stack, service_env, sink, counting = deployed
    _, tokens = _placed(stack, service_env, sink, DEVICES)
    appids = list(tokens)
    shards = {appid: shard_of_token(token) for appid, token in tokens.items()}
    per_shard = Counter(shards.values())
    assert per_shard == Counter({i: DEVICES // SHARDS for i in range(SHARDS)}), per_shard

    # Two events per instance through the receiver: each delivered once.
    urls = [f"{stack.base}{RECEIVER_PREFIX}{appid}/{tokens[appid]}" for appid in appids]
    with Load(urls, prefix="ev", limit=2 * DEVICES, threads=4, duration=60) as load:
        wait_for(lambda: load.acked() + load.refusals() >= 2 * DEVICES, timeout=60, what="the posts")
    assert load.refusals() == 0
    wait_for(lambda: len(counting.count("ev-")) == 2 * DEVICES, timeout=30, what="every event delivered")
    assert set(counting.count("ev-").values()) == {1}

    # Each instance's log is in its tag's slot, its name carrying that tag alone.
    for appid in appids[:4]:
        holder = _slot_holder(cluster, shards[appid] or 0)
        try:
            name = KeySpace(f"{{s{shards[appid] or 0}}}").callback_log(appid)
            assert name == f"{{s{shards[appid] or 0}}}svcgw:log:{appid}"
            assert holder.xlen(name) == 2
        finally:
            holder.close()

    # The operator's commands read each instance on its shard, and the dead letters of every shard.
    appid = next(a for a in appids if shards[a] == 7)
    assert len(ok(service_env, "log", appid)) == 2
    assert [d["state"] for d in ok(service_env, "deliveries", "list", appid)["deliveries"]] == ["delivered"] * 2
    listed = ok(service_env, "instances", "list")
    assert {row["appid"]: int(row["shard"]) for row in listed} == {a: shard or 0 for a, shard in shards.items()}
    dying = [next(a for a in appids if shards[a] == shard) for shard in (3, 11)]
    for appid in dying:
        body = orjson.dumps({"event_type": "Msg", "events": [{"id": f"dead-{appid}"}]})
        assert httpx.post(urls[appids.index(appid)], content=body, timeout=10).status_code == 200
    wait_for(lambda: len(ok(service_env, "dlq", "list")) == 2, timeout=20, interval=0.2, what="two dead letters")
    counting.healed.set()
    assert sorted(row["status"] for row in ok(service_env, "dlq", "replay", "--all")) == ["replayed", "replayed"]
    wait_for(lambda: len(counting.count("dead-")) == 2, timeout=20, what="the replayed dead letters delivered")
    assert set(counting.count("dead-").values()) == {1}
    shown = ok(service_env, "shards", "--json")
    assert len(shown) == SHARDS and all(row["healthy"] for row in shown)
    assert sum(row["instances"] for row in shown) == DEVICES
    scrape = httpx.get(f"{stack.base}/metrics", timeout=10).text  # loopback: no token needed
    assert all(f'svcgw_shard_up{{shard="{i}"}} 1.0' in scrape for i in range(SHARDS))
    # Each instance counted once, though shard 0's set of instances (the registry) lists them all.
    (counted,) = [f for f in text_string_to_metric_families(scrape) if f.name == "svcgw_instances"]
    assert sum(sample.value for sample in counted.samples) == DEVICES


def test_an_instance_on_a_virtual_shard_is_probed_reported_offline_and_recovered(
    deployed: tuple[Stack, dict[str, str], Sink, Counting]
) -> None:
    stack, service_env, sink, counting = deployed
    key, tokens = _placed(stack, service_env, sink, 2)
    appid = next(a for a, token in tokens.items() if shard_of_token(token) != 0)
    stack.login(key, appid)
    answer = stack.api(key, "long/start", {"appid": appid, "callbackUrl": sink.url, "pushHistory": False})
    assert answer.status_code == 200 and answer.json()["code"] == 0, answer.text
    started = Counter(stack.sim_instance(appid)["calls"])[PROBE_READ]
    wait_for(lambda: Counter(stack.sim_instance(appid)["calls"])[PROBE_READ] >= started + 2, timeout=20,
             what="probes of the instance on its shard")  # fmt: skip

    stack.sim_faults(appid=appid, drop=True, reconnect_fails=True)
    (offline,) = wait_for(lambda: counting.events(appid, "InstanceOffline"), timeout=30, what="InstanceOffline")
    assert offline["action_required"] == "relogin"
    stack.sim_faults(appid=appid, reconnect_fails=False)
    (recovered,) = wait_for(lambda: counting.events(appid, "InstanceRecovered"), timeout=30,
                            what="InstanceRecovered")  # fmt: skip
    assert recovered["auto_reconnected"] is True
    assert len(counting.events(appid, "InstanceOffline")) == 1


def test_a_masters_failover_loses_no_acknowledged_event(
    deployed: tuple[Stack, dict[str, str], Sink, Counting], cluster: RedisClusterFleet
) -> None:
    stack, service_env, sink, counting = deployed
    _, tokens = _placed(stack, service_env, sink, SHARDS)
    urls = [f"{stack.base}{RECEIVER_PREFIX}{appid}/{token}" for appid, token in tokens.items()]
    replica = cluster.replica_nodes()[0]  # of one of the masters: its shards' posts go on after it
    with Load(urls, prefix="fo", limit=100_000, threads=4, duration=60) as load:
        wait_for(lambda: load.acked() >= 200, timeout=30, what="posts before the failover")
        client = replica.client()
        try:
            client.execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
            wait_for(lambda: client.info("replication")["role"] == "master", timeout=30, what="the promotion")
        finally:
            client.close()
        promoted_at = load.acked()
        wait_for(lambda: load.acked() >= promoted_at + 300, timeout=30, what="posts after the failover")
    acknowledged = set(load.acknowledged)
    wait_for(lambda: not acknowledged - set(counting.count("fo-")), timeout=60,
             what="every acknowledged event delivered")  # fmt: skip
    print(f"failover: {len(acknowledged)} acknowledged, {load.refusals()} refused; all delivered")
