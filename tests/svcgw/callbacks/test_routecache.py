"""The receiver's routing records per instance: which further destinations take a post, read once a second.

Unit tests on fakeredis (its commands counted); the ingest script's deliveries to the destinations
are in ``tests/receiver/endpoint/test_fanout.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis

from svcgw.callbacks.routecache import NO_ROUTES, Routes, RoutesCache
from svcgw.storage.keys import PLAIN as keys

APPID = "we_1"
ACCOUNT = "acc_1"


def test_the_accounts_destinations_then_the_instances_each_once() -> None:
    routes = Routes(
        {"*": "dst_a", "Msg": "dst_b", "InstanceOffline": "dst_c"}, {"Msg": "dst_own dst_b", "*": "dst_all"}
    )
    assert routes.targets("Msg") == ["dst_a", "dst_b", "dst_all", "dst_own"]
    assert routes.targets("InstanceOffline") == ["dst_a", "dst_c", "dst_all"]
    assert routes.targets("GapClosed") == ["dst_a", "dst_all"]
    assert Routes({}, {"Msg": "dst_own"}).targets("Msg") == ["dst_own"]
    assert NO_ROUTES.targets("Msg") == []


class Counted(fakeredis.FakeAsyncRedis):
    """fakeredis that counts the commands it is sent (a pipeline's one by one)."""

    sent: list[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        buffer = pipe.pipeline_execute_command

        def counted(*args: Any, **options: Any) -> Any:
            self.sent.append(str(args[0]))
            return buffer(*args, **options)  # type: ignore[no-untyped-call]

        pipe.pipeline_execute_command = counted  # type: ignore[method-assign]
        return pipe


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _redis() -> Counted:
    redis = Counted(server=fakeredis.FakeServer())
    redis.sent = []
    return redis


async def _setup(redis: Counted) -> None:
    await redis.hset(keys.instance(APPID), "account", ACCOUNT)
    await redis.hset(keys.routes_account(ACCOUNT), mapping={"*": "dst_a", "Msg": "dst_b"})
    await redis.hset(keys.routes_instance(APPID), mapping={"Msg": "dst_own"})
    redis.sent.clear()


def test_records_are_read_once_per_period_and_the_account_once_per_process() -> None:
    async def main() -> None:
        redis, clock = _redis(), Clock()
        await _setup(redis)
        cache = RoutesCache(redis, keys, 1.0, clock=clock)
        assert await cache.targets(APPID, "Msg") == ["dst_a", "dst_b", "dst_own"]
        assert cache.account_of(APPID) == ACCOUNT
        first = list(redis.sent)
        assert first.count("HGET") == 1 and first.count("HGETALL") == 2, first
        # Within the period: nothing read, whatever the type.
        clock.now += 0.9
        assert await cache.targets(APPID, "InstanceOffline") == ["dst_a"]
        assert redis.sent == first
        # A destination added is taken once the period has passed; the account is not read again.
        await redis.hset(keys.routes_instance(APPID), "*", "dst_new")
        redis.sent.clear()
        clock.now += 0.2
        assert await cache.targets(APPID, "GapClosed") == ["dst_a", "dst_new"]
        assert sorted(redis.sent) == ["HGETALL", "HGETALL"]

    asyncio.run(main())


def test_an_instance_without_destinations_is_kept_as_such_and_costs_no_read_within_the_period() -> None:
    async def main() -> None:
        redis, clock = _redis(), Clock()
        await redis.hset(keys.instance(APPID), "account", ACCOUNT)
        redis.sent.clear()
        cache = RoutesCache(redis, keys, 1.0, clock=clock)
        for _ in range(50):
            assert await cache.targets(APPID, "Msg") == []
        assert cache.fresh(APPID) is NO_ROUTES
        assert sorted(redis.sent) == ["HGET", "HGETALL", "HGETALL"]

    asyncio.run(main())


def test_posts_waiting_for_one_instances_records_share_one_read() -> None:
    async def main() -> None:
        redis, clock = _redis(), Clock()
        await _setup(redis)
        cache = RoutesCache(redis, keys, 1.0, clock=clock)
        answers = await asyncio.gather(*(cache.targets(APPID, "Msg") for _ in range(20)))
        assert answers == [["dst_a", "dst_b", "dst_own"]] * 20
        assert sorted(redis.sent) == ["HGET", "HGETALL", "HGETALL"]

    asyncio.run(main())


def test_an_unknown_instance_is_not_remembered_and_zero_seconds_reads_every_time() -> None:
    async def main() -> None:
        redis, clock = _redis(), Clock()
        cache = RoutesCache(redis, keys, 0.0, clock=clock)
        assert await cache.targets(APPID, "Msg") == []
        assert cache.account_of(APPID) is None and redis.sent == ["HGET"]
        await _setup(redis)
        assert await cache.targets(APPID, "Msg") == ["dst_a", "dst_b", "dst_own"]
        assert await cache.targets(APPID, "Msg") == ["dst_a", "dst_b", "dst_own"]
        assert sorted(redis.sent) == ["HGET"] + ["HGETALL"] * 4

    asyncio.run(main())


def test_the_cache_is_bounded_the_least_recently_read_forgotten_first() -> None:
    cache = RoutesCache(_redis(), keys, 60.0, clock=Clock(), kept=2)
    for appid in ("we_a", "we_b", "we_c"):
        cache.keep(appid, Routes({"*": f"dst_{appid}"}, {}), 100.0)
    assert cache.fresh("we_a") is None
    assert cache.fresh("we_b") == Routes({"*": "dst_we_b"}, {}) and cache.fresh("we_c") is not None
