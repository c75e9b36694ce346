"""A command pointed at part of a sharded deployment says that it sees one shard of several."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis as AsyncRedis

from cli.partialview import LOOK_SECONDS, partial_view
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN
from tests.cli.commands import svcgw
from tests.conftest import run
from tests.deploy.redis_fleet import RedisClusterFleet, RedisFleet, sharded_store


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    with RedisFleet(tmp_path / "fleet", 3).start() as nodes:
        yield nodes


def _placed(settings: Settings) -> None:
    """An instance on each shard, counted on shard 0 as device/create counts them."""

    async def action() -> None:
        async with sharded_store(settings) as store:
            account = await store.create_account("partial")
            for shard in range(3):
                await store.register_instance(f"we_part{shard}", account.id, shard)

    run(action())


def test_a_command_given_shard_0_alone_says_it_sees_one_shard_of_several(
    env: dict[str, str], fleet: RedisFleet
) -> None:
    whole = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"} | {"SVCGW_REDIS_SHARDS": fleet.setting}
    _placed(Settings.from_env(whole))
    everything = svcgw(whole, "dlq", "list", "--json")
    assert everything.exit_code == 0 and everything.stderr == ""

    first = {**env, "SVCGW_REDIS_URL": fleet.urls()[0]}
    alone = svcgw(first, "dlq", "list", "--json")
    assert alone.exit_code == 0, alone.output
    assert alone.stdout.strip() == "[]"  # the output stays what it was: the warning is on stderr
    assert alone.stderr.startswith("svcgw: these settings name shard 0 alone of a deployment whose instances are "
                                   "placed on at least 3 shards: "), alone.stderr  # fmt: skip
    assert "SVCGW_REDIS_SHARDS" in alone.stderr

    two = {k: v for k, v in whole.items()} | {"SVCGW_REDIS_SHARDS": " ".join(fleet.urls()[:2])}
    assert "shards 0 to 1 of a deployment" in svcgw(two, "instances", "list", "--json").stderr


def test_a_command_given_a_cluster_node_as_one_redis_says_so(env: dict[str, str], tmp_path: Path) -> None:
    cluster = RedisClusterFleet(tmp_path / "cluster").start()
    try:
        node = {**env, "SVCGW_REDIS_URL": f"redis://{cluster.nodes[0].address}/0"}
        result = svcgw(node, "shards", "--json")
        assert result.stderr.startswith("svcgw: this Redis is a node of a Redis Cluster"), result.stderr
    finally:
        cluster.close()


def test_a_shard_0_that_does_not_answer_is_left_to_the_command_after_a_short_look(silent: int) -> None:
    """The look must not double the wait of a command whose Redis hangs: it gives up after LOOK_SECONDS."""
    settings = Settings.from_env({"SVCGW_REDIS_URL": f"redis://127.0.0.1:{silent}/0"})

    async def look() -> tuple[str | None, float]:
        client = AsyncRedis(host="127.0.0.1", port=silent, socket_timeout=60, socket_connect_timeout=60)
        started = time.monotonic()
        try:
            return await partial_view(client, PLAIN, settings), time.monotonic() - started
        finally:
            await client.aclose()

    said, took = asyncio.run(look())
    assert said is None and took < LOOK_SECONDS + 5  # the Redis would have held it for a minute
