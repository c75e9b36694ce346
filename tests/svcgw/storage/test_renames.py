"""The upgrade's one-off renames of keys of before (svcgw.storage.renames, renames.lua)."""

from __future__ import annotations

import asyncio
import inspect

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.storage import layoutversion, renames
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace
from tests.support_twotags import TwoTags


def _run(settings: Settings) -> renames.Retagged:
    async def main() -> renames.Retagged:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await renames.tag_instances(client, keys)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_untagged_names_and_their_appids() -> None:
    untagged = renames.untagged_instance_keys("we_1")
    assert untagged == ("svcgw:log:we_1", "svcgw:dead:we_1", "svcgw:instance:we_1:service-events",
                        "svcgw:instance:we_1:seq")  # fmt: skip
    tagged = renames.tagged_instance_keys(keys, "we_1")
    assert tagged == ("svcgw:log:{we_1}", "svcgw:dead:{we_1}",
                      "svcgw:instance:{we_1}:service-events", "svcgw:instance:{we_1}:seq")  # fmt: skip
    assert [renames.untagged_appid(name) for name in (*untagged, *tagged)] == [
        "we_1", "we_1", None, "we_1", None, None, None, None]  # fmt: skip
    assert renames.untagged_appid("svcgw:instance:we_1") is None


def test_every_untagged_key_is_renamed_once_with_its_expiry(settings: Settings, redis: Redis) -> None:
    log, dead, chain, seq = renames.untagged_instance_keys("we_a")
    redis.xadd(log, {"body": b"{}"}, id="1000-0")
    redis.expire(log, 500)
    redis.sadd(dead, "dlv_1")
    redis.rpush(chain, "dlv_2", "dlv_3")
    redis.set(seq, 7)
    redis.sadd(renames.untagged_instance_keys("we_b")[1], "dlv_4")
    redis.xadd(keys.callback_log("we_c"), {"body": b"{}"})  # tagged already: not touched

    assert _run(settings) == renames.Retagged(keys=8, renamed=5, merged=0, left=0)
    assert not any(redis.exists(name) for name in (log, dead, chain, seq))
    tagged_log, tagged_dead, tagged_chain, tagged_seq = renames.tagged_instance_keys(keys, "we_a")
    assert [entry_id for entry_id, _ in redis.xrange(tagged_log)] == [b"1000-0"]
    assert 0 < redis.ttl(tagged_log) <= 500
    assert redis.smembers(tagged_dead) == {b"dlv_1"}
    assert redis.lrange(tagged_chain, 0, -1) == [b"dlv_2", b"dlv_3"]
    assert redis.get(tagged_seq) == b"7"
    assert redis.smembers(keys.dead_letters_by_appid("we_b")) == {b"dlv_4"}
    # Again (a second process starting at once): nothing left to move.
    assert _run(settings) == renames.Retagged(keys=0, renamed=0, merged=0, left=0)


def test_a_key_under_both_names_is_merged(settings: Settings, redis: Redis) -> None:
    """A worker whose start found Redis down writes tagged names before anything is renamed."""
    log, dead, chain, seq = renames.untagged_instance_keys("we_a")
    tagged_log, tagged_dead, tagged_chain, tagged_seq = renames.tagged_instance_keys(keys, "we_a")
    redis.xadd(log, {"body": b"before"}, id="1000-0")
    redis.xadd(tagged_log, {"body": b"after"}, id="2000-0")
    redis.expire(log, 100)
    redis.expire(tagged_log, 900)
    redis.sadd(dead, "dlv_1")
    redis.sadd(tagged_dead, "dlv_2")
    redis.rpush(chain, "dlv_3")
    redis.rpush(tagged_chain, "dlv_4")
    redis.set(seq, 7)
    redis.set(tagged_seq, 1)
    # Logs that overlap in time (processes of both versions at once): the new one stays as it is.
    redis.xadd(renames.untagged_instance_keys("we_b")[0], {"body": b"old"}, id="3000-0")
    redis.xadd(keys.callback_log("we_b"), {"body": b"new"}, id="2000-0")

    assert _run(settings) == renames.Retagged(keys=8, renamed=0, merged=4, left=1)
    assert [(i, f[b"body"]) for i, f in redis.xrange(tagged_log)] == [(b"1000-0", b"before"), (b"2000-0", b"after")]
    assert 100 < redis.ttl(tagged_log) <= 900
    assert redis.smembers(tagged_dead) == {b"dlv_1", b"dlv_2"}
    assert redis.lrange(tagged_chain, 0, -1) == [b"dlv_3", b"dlv_4"]  # the older first
    assert redis.get(tagged_seq) == b"7"
    assert not any(redis.exists(name) for name in (log, dead, chain, seq))
    assert redis.xlen(keys.callback_log("we_b")) == 1 and redis.exists(renames.untagged_instance_keys("we_b")[0])


def test_the_marker_says_when_the_rename_was_done_and_it_is_not_done_again(settings: Settings, redis: Redis) -> None:
    async def read() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await layoutversion.read(client, keys, now=1234.0)
        finally:
            await client.aclose()

    redis.hset(keys.layout, mapping={"version": 2, "since": 1000, "dedup": "buckets"})  # the version before
    redis.sadd(renames.untagged_instance_keys("we_a")[1], "dlv_1")
    asyncio.run(read())
    assert redis.hget(keys.layout, "tags") == b"1234"
    assert redis.smembers(keys.dead_letters_by_appid("we_a")) == {b"dlv_1"}
    redis.sadd(renames.untagged_instance_keys("we_b")[1], "dlv_2")  # no version writes this any more
    asyncio.run(read())
    assert redis.exists(renames.untagged_instance_keys("we_b")[1])


def _every_name(space: KeySpace) -> dict[str, str]:
    """Every name ``space`` makes, by method or attribute, for an appid (or id) ``we_1`` and a bucket 7."""
    names: dict[str, str] = {}
    for attribute in dir(space):
        value = getattr(space, attribute)
        if attribute.startswith("_") or attribute in ("tag", "prefix", "rq"):
            continue
        if isinstance(value, str):
            names[attribute] = value
        elif callable(value):
            parameters = list(inspect.signature(value).parameters)
            names[attribute] = value(*["we_1", 7, "x"][: len(parameters)])
    return names


def test_a_cluster_name_of_before_loses_its_second_tag_and_no_other_name_changes() -> None:
    before, now = _every_name(TwoTags("{s3}")), _every_name(KeySpace("{s3}"))
    assert before.keys() == now.keys() and len(now) > 30
    changed = {attribute for attribute in now if before[attribute] != now[attribute]}
    assert changed == {"callback_log", "dedup_container", "dedup_bucket", "outcomes", "late_outcomes",
                       "dead_letters_by_appid", "service_events", "service_event_seq"}  # fmt: skip
    for attribute, name in before.items():
        assert renames.one_tag_name(name) == (now[attribute] if attribute in changed else None), name
    assert renames.one_tag_name("{s3}svcgw:log:{we_1}") == "{s3}svcgw:log:we_1"
    # Braces that are data, not a tag: an e-mail login, an appid of the capability layer's choosing.
    for kept in (KeySpace("{s0}").login("a{b}c@example.com"), KeySpace("{s0}").instance("{we_1}"),
                 "{s3}svcgw:log:{we_1}:x", "{s3}svcgw:instance:{we_1}", "{s3}svcgw:late:{we_1}"):  # fmt: skip
        assert renames.one_tag_name(kept) is None, kept
