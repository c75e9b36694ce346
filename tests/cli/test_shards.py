"""``svcgw shards`` on one Redis, placement in the registry, and the roles' refusal of several shards."""

from __future__ import annotations

import pytest
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from svcgw.shardkeys import SHARD_INSTANCES
from svcgw.shards import Shard
from svcgw.store import Store
from svcgw.storebase import digest
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import with_store


def test_one_redis_is_one_shard_with_its_instances_memory_queue_and_health(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    async def action(store: Store) -> None:
        account = await store.create_account("shards")
        for n in range(3):
            await store.register_instance(f"we_shards{n}", account.id)

    with_store(settings, action)
    redis.rpush("rq:queue:svcgw", "x")
    (row,) = ok(env, "shards")
    assert row["index"] == 0 and row["name"] == env["SVCGW_REDIS_URL"] and row["instances"] == 3
    assert row["healthy"] and row["error"] is None and row["ping_ms"] >= 0
    assert row["queue_depth"] == 1 and row["used_memory"] > 0 and not row["closed"] and row["weight"] == 1
    table = svcgw(env, "shards")
    assert table.exit_code == 0 and "ok," in table.stdout


def test_instances_registered_before_shards_count_on_shard_0(settings: Settings, redis: Redis) -> None:
    redis.sadd(keys.INSTANCES, "we_old1", "we_old2")  # as registered before shards were counted
    shards = [Shard(0, "a"), Shard(1, "b", 1), Shard(2, "c", 2)]

    async def action(store: Store) -> tuple[str | None, dict[int, int], str, str | None]:
        account = await store.create_account("shards")
        token = await store.register_instance("we_new", account.id, 2)
        owner, counts = await store.owner_and_counts("we_new", shards)
        return owner, counts, token, await store.redis.hget(keys.instance("we_new"), "shard")

    owner, counts, token, field = with_store(settings, action)
    assert owner is not None and counts == {0: 2, 1: 0, 2: 1}
    assert token.startswith("s2.") and field == "2"
    assert redis.hgetall(SHARD_INSTANCES) == {b"2": b"1"}
    assert redis.get(keys.receiver_lookup(digest(token))) == b"we_new"


@pytest.mark.parametrize("role", [["serve"], ["worker"], ["up"]])
def test_serve_worker_and_up_refuse_several_shards_for_now(env: dict[str, str], role: list[str]) -> None:
    several = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    several["SVCGW_REDIS_SHARDS"] = f"{env['SVCGW_REDIS_URL']} redis://127.0.0.1:1/0"
    message = fails(several, *role)
    assert "SVCGW_REDIS_SHARDS names 2 shards" in message and f"svcgw {role[0]}" in message
    cluster = {**several, "SVCGW_REDIS_SHARDS": "cluster://127.0.0.1:1"}
    assert "a Redis Cluster" in fails(cluster, *role)
