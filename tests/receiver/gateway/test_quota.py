"""The device quota's reservations, against a real Redis."""

from __future__ import annotations

import asyncio

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from receiver.gateway.quota import DeviceQuota
from svcgw.storage.keys import PLAIN as keys


def _async_redis(redis_url: str) -> AsyncRedis:
    return AsyncRedis.from_url(redis_url, decode_responses=True)


def test_reservations_are_atomic_and_count_an_appid_once(redis_url: str, redis: Redis) -> None:
    async def scenario() -> tuple[int, int, int]:
        client = _async_redis(redis_url)
        try:
            quota = DeviceQuota(client, keys)
            await client.sadd(keys.account_instances("acc"), "we_existing")
            held = await asyncio.gather(*(quota.reserve("acc", 4) for _ in range(20)))
            taken = [r for r in held if r is not None]
            # One creation succeeds: the slot becomes the appid, then the appid is registered.
            await quota.hold(taken[0], "we_new")
            full_while_renamed = await quota.reserve("acc", 4)
            await client.sadd(keys.account_instances("acc"), "we_new")
            full_while_both = await quota.reserve("acc", 4)
            for reservation in taken:
                await quota.release(reservation)
            again = [await quota.reserve("acc", 4) for _ in range(3)]
            return (
                len(taken),
                int(full_while_renamed is None) + int(full_while_both is None),
                sum(r is not None for r in again),
            )
        finally:
            await client.aclose()

    taken, full, again = asyncio.run(scenario())
    assert taken == 3  # quota 4, one instance already
    assert full == 2
    assert again == 2  # two instances now
