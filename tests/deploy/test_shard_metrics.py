"""``/metrics`` of a deployment of three shards counts each instance, delivery and dead letter once.

Shard 0's set of instances lists every shard's (it is the registry), while an
instance's transitions, and its count, live on its own shard: the first scrape
computes each shard's counts from its own instances only, and so does a
rebuild after shard 0's counts are lost, or when they were computed by the
earlier rule that counted every instance of the set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.liveness import transitions
from svcgw.registry.store import Scope
from svcgw.shards.clients import aclose_all, role_clients
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import run
from tests.deploy.redis_fleet import RedisFleet, register_placed, sharded_store
from tests.receiver.test_metrics import scrape
from tests.support import Received, Sink, ThreadedServer, ThreadedWorker, wait_for

pytestmark = pytest.mark.slow

SHARDS = 3
INSTANCES = 30
STARTED_PER_SHARD = 4


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    with RedisFleet(tmp_path / "fleet", SHARDS).start() as nodes:
        yield nodes


@pytest.fixture
def three(env: dict[str, str], fleet: RedisFleet) -> Settings:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    configured["SVCGW_RETRY_SCHEDULE"] = "0.1"  # one retry, then a dead letter
    return Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": fleet.setting})


def placed(settings: Settings, url: str) -> dict[int, list[tuple[str, str]]]:
    """An account whose default address is ``url`` and :data:`INSTANCES` instances placed as device/create
    places them: (appid, receiver token) by shard. The first :data:`STARTED_PER_SHARD` of each shard are
    started (``long/start``, on their shard)."""

    async def action() -> dict[int, list[tuple[str, str]]]:
        by_shard: dict[int, list[tuple[str, str]]] = {}
        async with sharded_store(settings) as store:
            account = await store.create_account("three shards", devices=None)
            await store.set_callback(Scope(account=account.id), url)
            for n in range(INSTANCES):
                appid = f"we_{n:015d}"
                token, shard = await register_placed(store, settings, account.id, appid)
                by_shard.setdefault(shard, []).append((appid, token))
        clients = role_clients(settings)
        try:
            for shard, placed in by_shard.items():
                for appid, _ in placed[:STARTED_PER_SHARD]:
                    await transitions.mark_started(*clients[shard], appid, 3600)
        finally:
            await aclose_all(clients)
        return by_shard

    return run(action())


def instances(values: dict[str, float]) -> dict[str, float]:
    prefix = "svcgw_instances{status="
    return {name[len(prefix) : -1]: value for name, value in values.items() if name.startswith(prefix) and value}


def post(base: str, appid: str, token: str, event_id: str) -> None:
    body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id}]})
    httpx.post(f"{base}/svc/receiver/{appid}/{token}", content=body, timeout=10).raise_for_status()


def refuse_dead(post: Received, earlier: list[Received]) -> tuple[int, float]:
    return (500 if b'"dead-' in post.body else 200), 0.0


def test_every_figure_counts_each_instance_delivery_and_dead_letter_once(
    three: Settings, fleet: RedisFleet
) -> None:
    sink = Sink(rule=refuse_dead).start()
    by_shard = placed(three, sink.url)
    assert sorted(len(p) for p in by_shard.values()) == [INSTANCES // SHARDS] * SHARDS
    registry = fleet.nodes[0].client()
    assert registry.scard(keys.instances) == INSTANCES  # the registry lists every shard's instances
    server = ThreadedServer(create_app(three)).start()
    worker = ThreadedWorker(three).start()
    try:
        online = STARTED_PER_SHARD * SHARDS
        expected = {"online": online, "not_started": INSTANCES - online}
        first = scrape(server.base)  # computes each shard's counts: its own instances only
        assert instances(first) == expected
        assert sum(instances(first).values()) == INSTANCES

        # One delivered event per shard, and one that dies on shard 2.
        for shard, placed_here in sorted(by_shard.items()):
            appid, token = placed_here[0]
            post(server.base, appid, token, f"ok-{shard}")
        appid, token = by_shard[2][1]
        post(server.base, appid, token, "dead-2")

        def settled() -> dict[str, float] | None:
            values = scrape(server.base)
            done = values.get("svcgw_deliveries_total{kind=primary,outcome=delivered}") == SHARDS
            return values if done and values.get("svcgw_deliveries_total{kind=primary,outcome=dead}") == 1 else None

        after = wait_for(settled, timeout=20, interval=0.2, what="the deliveries and the dead letter counted")
        assert after["svcgw_posts_received_total"] == SHARDS + 1
        assert after["svcgw_events_received_total"] == SHARDS + 1
        assert after["svcgw_delivery_attempts_total{kind=primary,outcome=delivered}"] == SHARDS
        assert after["svcgw_delivery_attempts_total{kind=primary,outcome=retry}"] == 1
        assert after["svcgw_delivery_attempts_total{kind=primary,outcome=dead}"] == 1
        assert after["svcgw_dead_letters_total{kind=primary}"] == 1
        assert after["svcgw_dead_letters"] == 1
        assert after["svcgw_shard_dead_letters{shard=2}"] == 1
        assert after["svcgw_delivery_latency_seconds_count"] == SHARDS
        assert sum(v for k, v in after.items() if k.startswith("svcgw_queue_depth{")) == 0
        assert len([p for p in sink.posts() if b'"ok-' in p.body]) == SHARDS

        # After: a change on shard 1 is counted there, once.
        appid, _ = by_shard[1][0]
        shard_one = role_clients(three)

        async def stop_it() -> None:
            try:
                await transitions.mark_stopped(*shard_one[1], appid)
            finally:
                await aclose_all(shard_one)

        run(stop_it())
        expected = {"online": online - 1, "not_started": INSTANCES - online, "stopped": 1}
        assert instances(scrape(server.base)) == expected

        # Shard 0's counts lost: rebuilt from shard 0's own instances.
        registry.delete(keys.metrics_instances)
        assert instances(scrape(server.base)) == expected
        # Counts computed by the earlier rule (every instance of the set, no "shard" field): replaced.
        registry.delete(keys.metrics_instances)
        registry.hset(keys.metrics_instances, mapping={"status|not_started": 26, "status|online": 4})
        assert instances(scrape(server.base)) == expected
        assert registry.hget(keys.metrics_instances, "shard") == b"0"
    finally:
        worker.stop()
        server.stop()
        sink.stop()
        registry.close()


def test_each_shard_rebuilds_its_counts_from_its_own_instances(three: Settings, fleet: RedisFleet) -> None:
    by_shard = placed(three, "http://127.0.0.1:9/unused")
    server = ThreadedServer(create_app(three)).start()
    nodes = [node.client() for node in fleet.nodes]
    try:
        assert sum(instances(scrape(server.base)).values()) == INSTANCES
        for shard, client in enumerate(nodes):
            own = INSTANCES // SHARDS
            stored = {k.decode(): int(v) for k, v in client.hgetall(keys.metrics_instances).items() if k != b"built_at"}
            assert stored == {
                "shard": shard,
                "probe_errors": 0,
                "status|online": STARTED_PER_SHARD,
                "status|not_started": own - STARTED_PER_SHARD,
            }, (shard, by_shard[shard])
    finally:
        server.stop()
        for client in nodes:
            client.close()
