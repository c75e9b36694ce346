"""SVCGW_REDIS_SHARDS and the settings that go with it: what they read, and what they refuse."""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from svcgw.config.settings import Settings, SettingsError
from svcgw.shards.clients import role_clients


def read(**env: str) -> Settings:
    return Settings.from_env(env)


def refused(**env: str) -> str:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    return str(caught.value)


def test_unset_is_one_shard_the_one_redis_as_before() -> None:
    settings = read(SVCGW_REDIS_URL="redis://:pw@db:6379/2")
    assert settings.redis_shards is None
    layout = settings.shard_layout
    assert [(s.index, s.name, s.closed, s.weight) for s in layout.shards] == [(0, "redis://db:6379/2", False, 1.0)]
    sentinel = read(SVCGW_REDIS_SENTINELS="s1:26379,s2:26379", SVCGW_REDIS_SENTINEL_MASTER="main")
    assert sentinel.shard_layout.shards[0].name == "sentinel://s1:26379,s2:26379/main"
    assert read().shard_layout.shards[0].name == "embedded" and not read().shard_layout.deployments


def test_shards_name_deployments_by_url_and_by_sentinel_group() -> None:
    settings = read(
        SVCGW_REDIS_SHARDS="redis://:secret@a:6379/0\n  sentinel://u:pw%40x@s1:26379,[::1]:26380/main/3  rediss://b:6380/1",
        SVCGW_SHARDS_CLOSED="2",
        SVCGW_SHARDS_WEIGHTS="1:2.5",
        SVCGW_REDIS_SENTINEL_PASSWORD="sentinels",
    )
    layout = settings.shard_layout
    assert [s.name for s in layout.shards] == [
        "redis://a:6379/0",
        "sentinel://s1:26379,[::1]:26380/main/3",
        "rediss://b:6380/1",
    ]
    assert [(s.closed, s.weight, s.deployment, s.tag) for s in layout.shards] == [
        (False, 1.0, 0, ""),
        (False, 2.5, 1, ""),
        (True, 1.0, 2, ""),
    ]
    group = layout.deployments[1]
    assert (group.kind, group.master, group.db, group.username, group.password) == ("sentinel", "main", 3, "u", "pw@x")
    assert group.addresses == (("s1", 26379), ("::1", 26380))
    # Shard 0 is also the one Redis of every role that reads one.
    assert settings.redis_url == "redis://:secret@a:6379/0" and settings.redis_configured
    assert "secret" not in repr(settings.redis_shards) and "pw@x" not in repr(settings.redis_shards)


def test_a_sentinel_group_first_is_every_roles_redis() -> None:
    settings = read(SVCGW_REDIS_SHARDS="sentinel://:pw@s1:26379/main/4 redis://b:1/0")
    assert settings.redis_sentinels == (("s1", 26379),)
    assert (settings.redis_sentinel_master, settings.redis_password, settings.redis_db) == ("main", "pw", 4)
    assert settings.redis_url is None


def test_one_entry_is_one_shard_and_serves() -> None:
    settings = read(SVCGW_REDIS_SHARDS="redis://a:6379/0")
    assert settings.redis_shards is not None and len(settings.redis_shards.shards) == 1
    assert settings.redis_url == "redis://a:6379/0"


def test_a_cluster_is_virtual_shards_each_a_hash_tag() -> None:
    settings = read(SVCGW_REDIS_SHARDS="cluster://:pw@n1:7000,n2:7001")
    layout = settings.shard_layout
    assert layout.cluster and len(layout.shards) == 16
    assert [s.tag for s in layout.shards[:3]] == ["{s0}", "{s1}", "{s2}"]
    assert {s.deployment for s in layout.shards} == {0}
    assert layout.shards[3].name == "cluster://n1:7000,n2:7001 {s3}"
    assert len(read(SVCGW_REDIS_SHARDS="cluster://n1:7000", SVCGW_CLUSTER_SHARDS="4").shard_layout.shards) == 4
    # One stock Cluster client for every shard; each shard's names carry its tag.
    clients = role_clients(settings)
    assert all(isinstance(redis, AsyncRedisCluster) and redis is clients[0].redis for redis, _ in clients)
    assert [names.tag for _, names in clients[:3]] == ["{s0}", "{s1}", "{s2}"]
    assert clients[3].keys.callback_log("we_1") == "{s3}svcgw:log:we_1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_REDIS_URL": "redis://b:1/0"}, "not both"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_REDIS_DB": "2"}, "SVCGW_REDIS_DB does not apply"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_REDIS_SENTINEL_PASSWORD": "x"}, "only to sentinel://"),
        ({"SVCGW_REDIS_SHARDS": "redis://:pw@a:1/0,redis://:pw@b:1/0"}, "separate entries with spaces"),
        ({"SVCGW_REDIS_SHARDS": "http://:pw@a:1/0"}, "must start with redis://"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0 redis:///0"}, "entry 2 ('redis:///0'): has no host"),
        ({"SVCGW_REDIS_SHARDS": "sentinel://:pw@s1:26379"}, "name the master"),
        ({"SVCGW_REDIS_SHARDS": "sentinel://:pw@s1:x/m"}, "host:port pairs, got 's1:x'"),
        ({"SVCGW_REDIS_SHARDS": "sentinel://:pw@s1:1/m/zero"}, "must be a number"),
        ({"SVCGW_REDIS_SHARDS": "cluster://:pw@n:1 redis://a:1/0"}, "must be the only one"),
        ({"SVCGW_REDIS_SHARDS": "cluster://:pw@n:1/0"}, "no database"),
        ({"SVCGW_REDIS_SHARDS": "cluster://n:1", "SVCGW_CLUSTER_SHARDS": "0"}, "from 1 to 1024"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_CLUSTER_SHARDS": "4"}, "only to a cluster://"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0 redis://b:1/0", "SVCGW_SHARDS_CLOSED": "2"}, "0 to 1, got '2'"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0 redis://b:1/0", "SVCGW_SHARDS_CLOSED": "0,1"}, "closes every"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_SHARDS_WEIGHTS": "0:0"}, "weight above 0"),
        ({"SVCGW_REDIS_SHARDS": "redis://a:1/0", "SVCGW_SHARDS_WEIGHTS": "0=2"}, "index:weight pairs"),
        ({"SVCGW_REDIS_URL": "redis://a:1/0", "SVCGW_SHARDS_CLOSED": "0"}, "only with SVCGW_REDIS_SHARDS"),
    ],
)
def test_bad_shard_settings_are_refused_naming_the_entry_never_a_password(env: dict[str, str], message: str) -> None:
    text = refused(**env)
    assert message in text
    assert "pw" not in text
