"""The Redis clients: a host that takes connections and never answers fails as Redis unreachable, in time;
pools sized by the settings, which wait for a free connection; a Cluster command cut off by a node's reset
fails as a lost connection."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from redis import BlockingConnectionPool
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import Connection
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from receiver.app import create_app
from svcgw.config.settings import Settings, SettingsError
from svcgw.errors import STORAGE_ERRORS
from svcgw.shards.connections import AsyncCluster, BlockingSentinelPool, async_client, sync_client
from svcgw.shards.packing import packing
from svcgw.shards.pools import WaitingPool, WaitingSentinelPool
from svcgw.storage.serverconfig import CLUSTER_SETTINGS
from tests.conftest import provision
from tests.deploy.redis_fleet import RedisClusterFleet
from tests.support import ThreadedServer


def test_the_read_timeout_outlasts_the_longest_wait_a_command_asks_for(env: dict[str, str]) -> None:
    assert Settings.from_env(env).redis_socket_timeout == 5.0
    assert Settings.from_env(dict(env, SVCGW_REDIS_TIMEOUT="0.5")).redis_socket_timeout == 2.0  # WAIT's 1 s + 1
    waited = Settings.from_env(dict(env, SVCGW_REDIS_TIMEOUT="2", SVCGW_REDIS_WAIT_TIMEOUT="0.1"))
    assert waited.redis_socket_timeout == 2.0


def test_a_post_to_a_shard_whose_host_never_answers_is_refused_in_time_and_the_others_go_on(
    env: dict[str, str], redis_url: str, silent: int
) -> None:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    settings = Settings.from_env(
        {**configured, "SVCGW_REDIS_SHARDS": f"{redis_url} redis://127.0.0.1:{silent}/0", "SVCGW_REDIS_TIMEOUT": "0.3",
         "SVCGW_REDIS_WAIT_TIMEOUT": "0.01"}
    )  # fmt: skip
    tenant = provision(settings)  # on shard 0
    server = ThreadedServer(create_app(settings)).start()
    try:
        with httpx.Client(timeout=30) as http:
            body = b'{"event_type":"Msg","events":[{"id":"a"}]}'
            started = time.monotonic()
            hung = http.post(f"{server.base}/svc/receiver/{tenant.appid}/s1.{tenant.receiver_token}", content=body)
            took = time.monotonic() - started
            assert hung.status_code == 503 and hung.headers["retry-after"] == "1"
            assert took < 5, took  # the read timeout (a connection that hangs would hold it for ever)
            stored = http.post(tenant.receiver_url(server.base), content=body)
            assert stored.status_code == 200, stored.text
    finally:
        server.stop()


def test_every_pool_is_sized_by_the_settings_and_waits_for_a_free_connection(env: dict[str, str]) -> None:
    defaults = Settings.from_env(env)
    assert (defaults.redis_max_connections, defaults.redis_pool_timeout) == (100, 5.0)
    settings = Settings.from_env(dict(env, SVCGW_REDIS_MAX_CONNECTIONS="12", SVCGW_REDIS_POOL_TIMEOUT="0.5"))
    pool = async_client(settings).connection_pool
    assert isinstance(pool, WaitingPool) and (pool.max_connections, pool.pool_timeout) == (12, 0.5)
    blocking = sync_client(settings)
    assert isinstance(blocking.connection_pool, BlockingConnectionPool)
    assert (blocking.connection_pool.max_connections, blocking.connection_pool.timeout) == (12, 0.5)
    blocking.close()
    for name, value in (("SVCGW_REDIS_MAX_CONNECTIONS", "1"), ("SVCGW_REDIS_MAX_CONNECTIONS", "many"),
                        ("SVCGW_REDIS_POOL_TIMEOUT", "0"), ("SVCGW_REDIS_POOL_TIMEOUT", "soon")):  # fmt: skip
        with pytest.raises(SettingsError, match=name):
            Settings.from_env(dict(env, **{name: value}))


def test_sentinel_and_cluster_clients_are_sized_by_the_settings_too() -> None:
    sized = {"SVCGW_REDIS_MAX_CONNECTIONS": "7", "SVCGW_REDIS_POOL_TIMEOUT": "0.25"}
    # Neither connects before its first command: nothing needs to listen on port 1.
    through_sentinel = Settings.from_env({**sized, "SVCGW_REDIS_SENTINELS": "127.0.0.1:1"})
    waiting = async_client(through_sentinel).connection_pool
    assert isinstance(waiting, WaitingSentinelPool) and (waiting.max_connections, waiting.pool_timeout) == (7, 0.25)
    blocking = sync_client(through_sentinel)
    assert isinstance(blocking.connection_pool, BlockingSentinelPool)
    assert (blocking.connection_pool.max_connections, blocking.connection_pool.timeout) == (7, 0.25)
    blocking.close()
    cluster = Settings.from_env({**sized, "SVCGW_REDIS_SHARDS": "cluster://127.0.0.1:1"})
    nodes = async_client(cluster).nodes_manager.startup_nodes.values()  # type: ignore[attr-defined]
    assert [node.max_connections for node in nodes] == [7]


@pytest.mark.parametrize(
    "cut_off",
    [
        AttributeError("'NoneType' object has no attribute 'writelines'"),
        RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed"),
    ],
)
def test_a_cluster_command_cut_off_by_a_nodes_reset_fails_as_a_lost_connection(
    cut_off: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What redis-py's Cluster client raises for a command whose connection it closed under it, after a node
    failed: the roles know a ConnectionError (not stored, try again), not these."""

    async def closed_under_it(self: AsyncRedisCluster, *args: object, **kwargs: object) -> object:
        raise cut_off

    monkeypatch.setattr(AsyncRedisCluster, "execute_command", closed_under_it)
    client = async_client(Settings.from_env({"SVCGW_REDIS_SHARDS": "cluster://127.0.0.1:1"}))
    assert isinstance(client, AsyncCluster)
    with pytest.raises(RedisConnectionError, match="connection closed under the command") as raised:
        asyncio.run(client.evalsha("0" * 40, 1, "{s0}k"))
    assert raised.value.__cause__ is cut_off
    assert isinstance(raised.value, STORAGE_ERRORS)


@pytest.mark.slow
def test_a_pipeline_to_a_killed_master_fails_at_once_and_cuts_off_no_command_on_the_others(tmp_path: Path) -> None:
    """A master killed: the pipelines of its slots fail as a lost connection, and the commands in flight on the
    masters that still answer finish (redis-py's pipeline would close every connection of the client before
    trying again, theirs included)."""
    extra = [arg for name, value in CLUSTER_SETTINGS.items() for arg in (f"--{name}", value)]
    cluster = RedisClusterFleet(tmp_path / "cluster", extra=extra).start()
    try:
        client = async_client(Settings.from_env({"SVCGW_REDIS_SHARDS": cluster.setting}))
        assert isinstance(client, AsyncCluster)

        async def scenario() -> None:
            try:
                await client.set("{s0}k", b"v")
                # Every node the client learnt from the Cluster packs its commands by hiredis.
                assert {node.connection_class for node in client.get_nodes()} == {packing(Connection)}
                victim = client.get_node_from_key("{s0}k")
                kept = next(f"{{s{i}}}k" for i in range(1, 64) if client.get_node_from_key(f"{{s{i}}}k") != victim)
                await client.set(kept, b"v")
                next(n for n in cluster.nodes if n.port == victim.port).kill()
                # A command in flight on a master that answers: it waits a second on its connection.
                waiting = asyncio.create_task(client.blpop([kept + ":list"], timeout=1))
                await asyncio.sleep(0.2)
                for _ in range(3):
                    pipe = client.pipeline()
                    pipe.get("{s0}k")
                    with pytest.raises(RedisConnectionError):
                        await pipe.execute()
                    with pytest.raises(RedisConnectionError):
                        await client.exists("{s0}k")  # one key's EXISTS is a pipeline in redis-py
                assert await waiting is None  # its wait ended, not cut off
                assert await client.get(kept) == b"v"
            finally:
                await client.aclose()

        asyncio.run(scenario())
    finally:
        cluster.close()


@pytest.mark.parametrize(
    "key",
    [
        "svcgw:{s3}:queue",
        "{s3}",
        "svcgw:{}:empty-tag",  # an empty tag: the whole key is hashed
        "svcgw:{a}{b}:first-tag",
        "svcgw:}{x}:closing-first",
        "svcgw:{open-only",
        "no tag at all",
        "svcgw:{ünï}:cödé",
        b"svcgw:{s3}:bytes",
        "",
    ],
)
def test_a_cluster_clients_slot_of_a_key_is_redis_pys(key: str | bytes) -> None:
    client = AsyncCluster(startup_nodes=[AsyncClusterNode("127.0.0.1", 7000)])
    expected = key_slot(key.encode() if isinstance(key, str) else key)
    assert client.keyslot(key) == expected
    assert client.keyslot(key) == expected  # the tag's slot, once known
