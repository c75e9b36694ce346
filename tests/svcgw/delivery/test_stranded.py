"""The record of stranded deliveries handed back: counted, and kept until each is attempted again or finished."""

from __future__ import annotations

import asyncio

import fakeredis

from svcgw.counters import STRANDED
from svcgw.delivery import stranded
from svcgw.storage.keys import KeySpace


def test_an_entry_leaves_once_attempted_again_or_finished_and_stays_until_then() -> None:
    keys = KeySpace("{s3}")

    async def main() -> tuple[int, int, dict[bytes, bytes], int, bytes | None]:
        redis = fakeredis.FakeAsyncRedis()
        # retried: its job is there, one attempt more than when handed back; waiting: none more;
        # delivered: its job hash is gone.
        await redis.hset(keys.rq.job("retried"), mapping={"status": "scheduled"})
        await redis.hset(keys.delivery("retried"), mapping={"attempts": 3})
        await redis.hset(keys.rq.job("waiting"), mapping={"status": "queued"})
        await redis.hset(keys.delivery("waiting"), mapping={"attempts": 2})
        await stranded.record(redis, keys, {"retried": 2, "waiting": 2, "delivered": 0})
        before = await stranded.unresolved(redis, keys)
        left = await stranded.resolve(redis, keys)
        noted = await redis.hgetall(keys.stranded)
        ttl = await redis.ttl(keys.stranded)
        counted = await redis.hget(keys.metrics_counters, STRANDED)
        await redis.aclose()
        return before, left, noted, ttl, counted

    before, left, noted, ttl, counted = asyncio.run(main())
    assert (before, left) == (3, 1)
    assert noted == {b"waiting": b"2"}
    assert 0 < ttl <= stranded.RECORD_SECONDS
    assert counted == b"3"


def test_with_nothing_noted_nothing_is_left() -> None:
    async def main() -> int:
        redis = fakeredis.FakeAsyncRedis()
        try:
            await stranded.record(redis, KeySpace(), {})
            return await stranded.resolve(redis, KeySpace())
        finally:
            await redis.aclose()

    assert asyncio.run(main()) == 0
