"""svcgw.shards.pools against a real Redis: a full pool makes commands wait, in turn and for a bounded time."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from svcgw.shards.pools import WaitingPool


def client(redis_url: str, *, size: int, wait: float = 5.0) -> Redis:
    return Redis.from_pool(WaitingPool.from_url(redis_url, max_connections=size, pool_timeout=wait))


def hold(redis: Redis, seconds: float) -> asyncio.Task[object]:
    """A command that keeps its connection for ``seconds`` without holding Redis up (BLPOP of no list)."""
    return asyncio.ensure_future(redis.blpop(["svcgw-test:nothing"], timeout=seconds))


async def settled() -> None:
    """Every task started so far has run up to its first wait."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_full_pool_makes_commands_wait_where_redis_py_s_own_fails_them_at_once(redis_url: str) -> None:
    async def main() -> tuple[list[object], float, BaseException]:
        waiting = client(redis_url, size=2)
        started = time.monotonic()
        answers = await asyncio.gather(*(waiting.blpop(["svcgw-test:nothing"], timeout=0.1) for _ in range(6)))
        took = time.monotonic() - started
        await waiting.aclose()
        failing = Redis.from_pool(ConnectionPool.from_url(redis_url, max_connections=2))
        failed = await asyncio.gather(*(failing.blpop(["svcgw-test:nothing"], timeout=0.1) for _ in range(6)),
                                      return_exceptions=True)  # fmt: skip
        await failing.aclose()
        error = next(answer for answer in failed if isinstance(answer, BaseException))
        return answers, took, error

    answers, took, error = asyncio.run(main())
    assert answers == [None] * 6
    assert took >= 0.25  # three rounds of two: they waited for each other
    assert isinstance(error, RedisConnectionError)  # redis-py's MaxConnectionsError


def test_a_command_waits_at_most_the_pool_timeout_then_fails_as_redis_unavailable(redis_url: str) -> None:
    async def main() -> tuple[BaseException, float, object]:
        redis = client(redis_url, size=1, wait=0.2)
        held = hold(redis, 1)
        await settled()
        started = time.monotonic()
        with pytest.raises(RedisConnectionError, match=r"no Redis connection free within 0\.2 s") as failed:
            await redis.get("svcgw-test:x")
        took = time.monotonic() - started
        await held
        after = await redis.ping()  # the pool is whole again
        await redis.aclose()
        return failed.value, took, after

    _, took, after = asyncio.run(main())
    assert 0.15 <= took < 1.0 and after is True


def test_waiters_are_served_in_turn_and_one_that_gives_up_passes_its_turn_on(redis_url: str) -> None:
    async def main() -> tuple[list[str], float]:
        redis = client(redis_url, size=1)
        order: list[str] = []

        async def command(name: str) -> None:
            await redis.get("svcgw-test:x")
            order.append(name)

        held = hold(redis, 0.2)
        await settled()
        waiters = {}
        for name in ("first", "quitter", "second", "third"):
            waiters[name] = asyncio.ensure_future(command(name))
            await settled()
        waiters["quitter"].cancel()
        started = time.monotonic()
        await asyncio.gather(held, waiters["first"], waiters["second"], waiters["third"])
        took = time.monotonic() - started
        # Arriving now, with the pool free: served at once.
        await command("late")
        await redis.aclose()
        return order, took

    order, took = asyncio.run(main())
    assert order == ["first", "second", "third", "late"]
    assert took < 2.0  # not the 5 s a lost turn would have cost


def test_a_connection_released_is_kept_for_the_first_waiter_not_taken_by_a_command_arriving_then(
    redis_url: str,
) -> None:
    async def main() -> list[str]:
        pool = WaitingPool.from_url(redis_url, max_connections=1, pool_timeout=2)
        order: list[str] = []
        mine = await pool.get_connection()
        waiter = asyncio.ensure_future(pool.get_connection())
        await settled()

        async def waiter_gives_back() -> None:
            connection = await waiter
            await asyncio.sleep(0.1)
            order.append("the waiter's turn ended")
            await pool.release(connection)

        gives_back = asyncio.ensure_future(waiter_gives_back())
        await pool.release(mine)
        # Asked for in the same turn of the loop, before the woken waiter has run.
        newcomer = await pool.get_connection()
        order.append("the newcomer's turn")
        await pool.release(newcomer)
        await gives_back
        await pool.disconnect()
        return order

    assert asyncio.run(main()) == ["the waiter's turn ended", "the newcomer's turn"]
