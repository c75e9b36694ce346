"""Further destinations on two ``redis-server`` shards: the routing records and hashes copied where they are read.

An account's go to every shard, an instance's to its own; every change follows, a removal too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from svcgw.callbacks.addresses import check_for_service
from svcgw.config.settings import Settings
from svcgw.registry.destinations import DestinationChange
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import run
from tests.deploy.redis_fleet import RedisFleet, sharded_store

pytestmark = pytest.mark.slow


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    with RedisFleet(tmp_path / "fleet", 2).start() as nodes:
        yield nodes


@pytest.fixture
def two(env: dict[str, str], fleet: RedisFleet) -> Settings:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    return Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": fleet.setting})


def test_destinations_are_copied_to_the_shards_that_deliver_for_them(two: Settings, fleet: RedisFleet) -> None:
    url = check_for_service("http://127.0.0.1:9/hook", two)

    async def setup() -> tuple[str, str, str]:
        async with sharded_store(two) as store:
            account = (await store.create_account("two shards")).id
            await store.register_instance("we_zero", account, 0)
            await store.register_instance("we_one", account, 1)
            shared = await store.add_destination(Scope(account=account), url, event_types=["Msg"])
            own = await store.add_destination(Scope(appid="we_one"), url, bearer_token="t0ken-of-we-one")
            return account, shared.id, own.id

    account, shared, own = run(setup())
    first, second = (node.client(decode_responses=True) for node in fleet.nodes)
    try:
        assert second.hgetall(keys.destination(shared)) == first.hgetall(keys.destination(shared)) != {}
        assert second.hgetall(keys.routes_account(account)) == {"Msg": shared}
        assert second.hgetall(keys.destination(own)) == first.hgetall(keys.destination(own)) != {}
        assert second.hgetall(keys.routes_instance("we_one")) == {"*": own}

        async def change() -> None:
            async with sharded_store(two) as store:
                await store.update_destination(shared, DestinationChange(event_types=[]))
                await store.rotate_destination_secret(own)
                await store.update_destination(own, DestinationChange(enabled=False))

        run(change())
        assert second.hgetall(keys.routes_account(account)) == {"*": shared}
        assert second.hgetall(keys.destination(own)) == first.hgetall(keys.destination(own))
        assert second.hget(keys.destination(own), "enabled") == "0" and not second.exists(
            keys.routes_instance("we_one")
        )

        async def remove() -> None:
            async with sharded_store(two) as store:
                await store.remove_destination(shared)
                await store.remove_destination(own)

        run(remove())
        for client in (first, second):
            for key in (keys.destination(shared), keys.destination(own), keys.routes_account(account)):
                assert not client.exists(key), key
    finally:
        first.close()
        second.close()


def test_on_a_redis_cluster_every_change_is_one_transaction_on_shard_0s_slot_and_copied(
    env: dict[str, str], tmp_path: Path
) -> None:
    from tests.deploy.redis_fleet import RedisClusterFleet

    cluster = RedisClusterFleet(tmp_path / "cluster").start()
    try:
        configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
        settings = Settings.from_env(
            {**configured, "SVCGW_REDIS_SHARDS": cluster.setting, "SVCGW_CLUSTER_SHARDS": "4"}
        )
        url = check_for_service("http://127.0.0.1:9/hook", settings)

        async def scenario() -> None:
            async with sharded_store(settings) as store:
                assert store.copies is not None and len(store.copies.shards) == 4
                account = (await store.create_account("cluster")).id
                await store.register_instance("we_three", account, 3)
                saved = [
                    await store.add_destination(Scope(account=account), url, event_types=[f"T{i}"]) for i in range(3)
                ]
                own = await store.add_destination(Scope(appid="we_three"), url)
                await store.update_destination(saved[0].id, DestinationChange(enabled=False))
                await store.remove_destination(saved[1].id)
                shards, spaces = store.copies.shards, store.copies.spaces
                for index in range(4):
                    routes = await shards[index].hgetall(spaces[index].routes_account(account))
                    assert routes == {"T2": saved[2].id}, index
                    assert not await shards[index].exists(spaces[index].destination(saved[1].id))
                assert await shards[3].hgetall(spaces[3].routes_instance("we_three")) == {"*": own.id}
                assert await shards[3].hget(spaces[3].destination(own.id), "url") == url.url
                assert not await shards[2].exists(spaces[2].destination(own.id))

        run(scenario())
    finally:
        cluster.close()
