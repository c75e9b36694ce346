"""A Cluster shard's client: which arguments are keys, and the tag put in front of them."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from svcgw.clusterspace import UnplaceableCommand, key_positions, tagged, untagged

# Commands as the service, RQ and redis-py send them, with the keys Redis itself finds in them.
SAMPLES: list[tuple[Any, ...]] = [
    ("HSET", "h", "f", "v", "g", "w"),
    ("EVALSHA", "0" * 40, "3", "k1", "k2", "k3", "a1", "a2"),
    ("EVAL", "return 1", "0", "a1"),
    ("DEL", "a", "b", "c"),
    ("EXISTS", "a", "b"),
    ("MSET", "a", "1", "b", "2"),
    ("BLMOVE", "src", "dst", "LEFT", "LEFT", "0.5"),
    ("BLPOP", "a", "b", "1"),
    ("XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0-0", "0-0"),
    ("ZUNIONSTORE", "dest", "2", "z1", "z2", "WEIGHTS", "1", "2"),
    ("XADD", "s", "MINID", "~", "0-1", "*", "f", "v"),
    ("ZADD", "z", "1", "m"),
    ("ZMSCORE", "z", "a", "b"),
    ("WATCH", "a", "b"),
    ("MEMORY", "USAGE", "k", "SAMPLES", "0"),
    ("RENAME", "a", "b"),
]


@pytest.mark.parametrize("command", SAMPLES, ids=lambda c: " ".join(map(str, c[:2])))
def test_the_keys_are_those_redis_finds(command: tuple[Any, ...], redis: Redis) -> None:
    expected = list(redis.command_getkeys(*command))
    assert [command[i] for i in key_positions(command)] == expected


def test_a_tag_goes_in_front_of_every_key_and_nothing_else() -> None:
    assert tagged("{s3}", ("EVALSHA", "sha", 2, "svcgw:log:{a}", b"rq:job:x", "svcgw:log:{a}")) == (
        "EVALSHA", "sha", 2, "{s3}svcgw:log:{a}", b"{s3}rq:job:x", "svcgw:log:{a}",
    )  # fmt: skip
    assert tagged("{s3}", ("MEMORY USAGE", "k")) == ("MEMORY USAGE", "{s3}k")
    assert tagged("{s3}", ("SCRIPT LOAD", "return 1")) == ("SCRIPT LOAD", "return 1")
    assert tagged("{s3}", ("PING",)) == ("PING",)
    # Redis 8's HSETEX (the de-duplication window's), which the Redis the tests run on may not have.
    assert tagged("{s3}", ("HSETEX", "dd", "FNX", "EX", "10", "FIELDS", "1", "f", "1"))[1] == "{s3}dd"
    assert untagged("{s3}", b"{s3}svcgw:log:{a}") == b"svcgw:log:{a}"
    assert untagged("{s3}", "svcgw:other") == "svcgw:other"


def test_a_command_whose_keys_cannot_be_found_is_refused() -> None:
    with pytest.raises(UnplaceableCommand, match="SORT"):
        key_positions(("SORT", "k", "STORE", "dst"))
