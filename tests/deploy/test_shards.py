"""Shards over real Redis deployments: three ``redis-server``s, and a real local Redis Cluster.

Placement runs through the gateway (in-process, over the simulator) with
three deployments in ``SVCGW_REDIS_SHARDS``, and goes past a shard that is
down; ``svcgw shards`` reads every shard; on the Cluster, the clients reach
every virtual shard and a script whose keys share one ``{s<i>}`` tag runs, and
``/readyz`` asks each virtual shard.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis import Redis

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from svcgw.shards.clients import AsyncShardClients, ShardClients
from svcgw.shards.placement import shard_of_token
from svcgw.storage.keys import PLAIN
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import svcgw
from tests.conftest import run
from tests.deploy.redis_fleet import RedisClusterFleet, RedisFleet, cluster_fixture, sharded, stop
from tests.receiver.gateway.stack import Stack, error, start_stack
from tests.receiver.gateway.stack import sim as sim
from tests.support import ThreadedServer

# Real processes: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

INSTANCES = 300


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    nodes = RedisFleet(tmp_path / "fleet", 3).start()
    try:
        yield nodes
    finally:
        nodes.close()


cluster = cluster_fixture()


def shards_json(env: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    result = svcgw(env, "shards", "--json")
    assert "Traceback" not in result.output
    return result.exit_code, orjson.loads(result.stdout)


def refuses(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_the_fleet_and_the_cluster_start_and_stop_clean(tmp_path: Path) -> None:
    fleet = RedisFleet(tmp_path / "fleet", 3).start()
    cluster = RedisClusterFleet(tmp_path / "cluster", replicas=1).start()
    try:
        assert all(node.answers() for node in fleet.nodes + cluster.nodes)
        assert len(cluster.masters()) == 3 and len(cluster.nodes) == 6
    finally:
        fleet.close()
        cluster.close()
    for node in fleet.nodes + cluster.nodes:
        assert node.proc is not None and node.proc.returncode == 0, node.log()  # SIGTERM: a clean shutdown
        assert refuses(node.port)


def test_the_gateway_places_300_instances_a_third_on_each_of_three_shards(
    env: dict[str, str], sim: str, fleet: RedisFleet
) -> None:
    service_env = sharded(env, fleet.setting, SVCGW_RATE_LIMIT="100000/minute")
    stack = start_stack(service_env, sim)
    try:
        _, key = stack.account(devices=None)
        with ThreadPoolExecutor(4) as pool:  # creations at once, as callers make them
            appids = list(pool.map(lambda _: stack.create_device(key), range(INSTANCES)))
        assert len(set(appids)) == INSTANCES

        async def registry(store: Store) -> dict[str, tuple[str | None, int | None]]:
            placed = {}
            for appid in appids:
                token = await store.receiver_token(appid)
                placed[appid] = (await store.redis.hget(keys.instance(appid), "shard"), shard_of_token(token))
            return placed

        placed = stack.store(registry)
    finally:
        stack.stop()
    # The registry records each instance's shard, and its receiver token names the same one.
    assert all(field == str(token_shard) for field, token_shard in placed.values())
    per_shard = Counter(token_shard for _, token_shard in placed.values())
    print(f"placement of {INSTANCES} over 3 shards: {dict(sorted(per_shard.items()))}")
    assert all(0.85 * INSTANCES / 3 <= per_shard[i] <= 1.15 * INSTANCES / 3 for i in range(3)), per_shard

    code, rows = shards_json(service_env)
    assert code == 0
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert [row["name"] for row in rows] == fleet.urls()
    assert [row["instances"] for row in rows] == [per_shard[i] for i in range(3)]
    assert all(row["healthy"] and row["queue_depth"] == 0 and row["used_memory"] > 0 for row in rows)
    counts = fleet.nodes[0].client(decode_responses=True).hgetall(PLAIN.shard_instances)
    assert {int(i): int(n) for i, n in counts.items()} == dict(per_shard)


def test_device_create_goes_past_a_shard_that_is_down_and_fails_only_when_no_open_shard_answers(
    env: dict[str, str], sim: str, fleet: RedisFleet
) -> None:
    # Shard 0 (the registry) closed to new instances: shards 1 and 2 take them.
    stack = start_stack(sharded(env, fleet.setting, SVCGW_SHARDS_CLOSED="0"), sim)
    registry = fleet.nodes[0].client(decode_responses=True)
    try:
        _, key = stack.account(devices=None)
        assert [placed_on(stack, stack.create_device(key)) for _ in range(2)] == [1, 2]  # even: the lower first
        chosen = fleet.nodes[1].client()
        chosen.config_resetstat()
        assert placed_on(stack, stack.create_device(key)) == 1
        # On the connection the first one opened, the chosen shard is asked nothing before the copies.
        stats = chosen.info("commandstats")
        chosen.close()
        assert stats["cmdstat_exec"]["calls"] == 1 and "cmdstat_ping" not in stats, stats

        fleet.nodes[2].kill()  # the next choice: it has one instance, shard 1 two
        fourth = stack.create_device(key)
        assert placed_on(stack, fourth) == 1
        shard_one = fleet.nodes[1].client(decode_responses=True)
        owner = registry.hget(keys.instance(fourth), "account")
        assert shard_one.hgetall(keys.instance(fourth)) == {"account": owner, "shard": "1"}
        shard_one.close()
        assert registry.hgetall(PLAIN.shard_instances) == {"1": "3", "2": "1"}
        post = stack.client.post(stack.receiver_url(fourth), content=b'{"event_type":"Msg","events":[{"id":"p1"}]}')
        assert post.status_code == 200  # its shard answers

        fleet.nodes[1].kill()  # no open shard answers now
        body = {"appid": "", "type": "iPad", "name": "t", "version": 0}
        assert error(stack.api(key, "device/create", body)) == (502, -50002)
        assert registry.hgetall(PLAIN.shard_instances) == {"1": "3", "2": "1"}
        assert registry.scard(keys.instances) == 4  # nothing of it registered

        fleet.nodes[2].start()  # back, empty: it takes the next instance again
        assert placed_on(stack, stack.create_device(key)) == 2
        assert registry.hgetall(PLAIN.shard_instances) == {"1": "3", "2": "2"}
    finally:
        registry.close()
        stack.stop()


def placed_on(stack: Stack, appid: str) -> int | None:
    """The shard the registry records for ``appid``, checked against the one its receiver token names."""

    async def read(store: Store) -> tuple[str | None, str]:
        return await store.redis.hget(keys.instance(appid), "shard"), await store.receiver_token(appid)

    field, token = stack.store(read)
    shard = shard_of_token(token)
    assert field == str(shard), (field, token)
    return shard


def test_svcgw_shards_shows_a_shard_that_is_down_and_the_others(env: dict[str, str], fleet: RedisFleet) -> None:
    for node in fleet.nodes[1:]:  # shards 1 and 2 with a password, which nothing may print
        client = node.client()
        client.config_set("requirepass", "hunter2")
        client.close()
    urls = [fleet.urls()[0], *fleet.urls(password="hunter2")[1:]]
    service_env = sharded(env, " ".join(urls))
    queued = Redis(host="127.0.0.1", port=fleet.nodes[2].port, password="hunter2")
    queued.rpush("rq:queue:svcgw", "a", "b")
    queued.close()
    stop(fleet.nodes[1])

    result = svcgw(service_env, "shards", "--json")
    assert result.exit_code == 1 and "hunter2" not in result.output
    assert "shard(s) 1 did not answer" in result.stderr
    rows = orjson.loads(result.stdout)
    assert [row["healthy"] for row in rows] == [True, False, True]
    assert "Connection" in rows[1]["error"] and rows[1]["instances"] == 0
    assert [row["name"] for row in rows] == fleet.urls()
    assert rows[2]["queue_depth"] == 2
    table = svcgw(service_env, "shards")
    assert table.exit_code == 1 and "ok," in table.stdout and "hunter2" not in table.output


def test_the_cluster_clients_keep_each_virtual_shard_in_its_slot(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    service_env = sharded(env, cluster.setting, SVCGW_CLUSTER_SHARDS="16")
    settings = Settings.from_env(service_env)

    async def each_shard() -> dict[int, str]:
        clients = AsyncShardClients(settings, decode=True)
        try:
            assert len(clients.distinct()) == 1  # one stock Cluster client for every shard
            nodes = {}
            for shard in clients.shards:
                client, names = clients.of(shard), clients.keys_of(shard)
                probe = names.prefix + "probe"
                assert probe == f"{shard.tag}svcgw:probe"
                assert await client.set(probe, str(shard.index)) is True
                assert await client.get(probe) == str(shard.index)  # each shard its own names
                nodes[shard.index] = client.get_node_from_key(probe).name
            # A shard's names share one slot: one script, one transaction.
            script = (
                "redis.call('SET', KEYS[1], ARGV[1]); redis.call('RPUSH', KEYS[2], ARGV[1]); "
                "return redis.call('LLEN', KEYS[2])"
            )
            one, three = clients.of(clients.shards[3]), clients.keys_of(clients.shards[3])
            queue = three.rq.queue("svcgw")
            assert await one.eval(script, 2, three.prefix + "a", queue, "x") == 1
            assert await one.eval(script, 2, three.prefix + "a", queue, "y") == 2
            async with one.pipeline(transaction=True) as pipe:
                pipe.rpush(queue, "z")
                pipe.hset(three.prefix + "h", "f", "v")
                assert await pipe.execute() == [3, 1]
            four = clients.keys_of(clients.shards[4])
            assert await clients.of(clients.shards[4]).llen(four.rq.queue("svcgw")) == 0
            # A SCAN of the shard's master finds the shard's keys by their tag (the upgrade's rename scans).
            node = one.get_node_from_key(queue)
            found = [k async for k in one.scan_iter(match=three.rq.queue("*"), target_nodes=node)]
            assert found == [queue]
            return nodes
        finally:
            await clients.aclose()

    nodes = run(each_shard())
    assert set(nodes.values()) == cluster.masters()  # 16 tags spread over every master
    node = next(n for n in cluster.nodes if n.address == nodes[3]).client()
    try:
        assert node.llen("{s3}rq:queue:svcgw") == 3  # the shard's tag in front of the name
    finally:
        node.close()
    blocking = ShardClients(settings, decode=True)
    try:
        five = blocking.shards[5]
        assert blocking.of(five).get(blocking.keys_of(five).prefix + "probe") == "5"
    finally:
        blocking.close()

    code, rows = shards_json(service_env)
    assert code == 0 and len(rows) == 16
    assert all(row["healthy"] and row["used_memory"] > 0 for row in rows)
    assert {row["node"] for row in rows} == cluster.masters()
    assert [row["queue_depth"] for row in rows if row["index"] == 3] == [3]
    assert all(row["instances"] == 0 for row in rows)


def test_readyz_on_a_cluster_asks_each_virtual_shard(env: dict[str, str], cluster: RedisClusterFleet) -> None:
    settings = Settings.from_env(sharded(env, cluster.setting, SVCGW_CLUSTER_SHARDS="8"))
    server = ThreadedServer(create_app(settings)).start()
    try:
        ready = httpx.get(f"{server.base}/readyz", timeout=10)
    finally:
        server.stop()
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "redis": "ok", "shards": [{"shard": i, "redis": "ok"} for i in range(8)],
                            "unreachable": []}  # fmt: skip
