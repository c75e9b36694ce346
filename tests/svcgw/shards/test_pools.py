"""svcgw.shards.pools against a real Redis: a full pool makes commands wait, in turn and for a bounded time;
and the redis-py pool hooks it is built of behave, on the pinned redis-py, as it relies on."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.maint_notifications import MaintNotificationsConfig, NodeMovingNotification

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


def test_commands_arriving_while_a_release_closes_its_connection_wait_rather_than_fail(
    redis_url: str,
) -> None:
    """redis-py's release holds the pool's lock while it closes a connection marked for reconnecting, and its own
    get_connection takes that lock before it takes a connection, so it yields between the look and the take;
    this pool's look and take are one step all the same."""

    async def main() -> list[object]:
        pool = WaitingPool.from_url(redis_url, max_connections=1, pool_timeout=2)
        marked = await pool.get_connection()
        marked.mark_for_reconnect()  # type: ignore[no-untyped-call]
        releasing = asyncio.ensure_future(pool.release(marked))
        commands = [asyncio.ensure_future(pool.get_connection()) for _ in range(2)]
        await releasing
        answers = []
        for command in asyncio.as_completed(commands):
            connection = await command
            answers.append(await _ping(connection))
            await pool.release(connection)
        await pool.disconnect()
        return answers

    assert asyncio.run(main()) == [b"PONG", b"PONG"]


def take(pool: ConnectionPool) -> AbstractConnection:
    """redis-py's ``get_available_connection``, typed."""
    connection: AbstractConnection = pool.get_available_connection()  # type: ignore[no-untyped-call]
    return connection


async def _ping(connection: object) -> object:
    await connection.send_command("PING")  # type: ignore[attr-defined]
    return await connection.read_response()  # type: ignore[attr-defined]


# What the pool relies on in redis-py's pool (redis 8.1), pinned: an upgrade that changes it fails here.


def test_redis_py_s_get_available_connection_takes_a_connection_at_once_without_yielding(redis_url: str) -> None:
    pool = ConnectionPool.from_url(redis_url, max_connections=2)
    assert not inspect.iscoroutinefunction(pool.get_available_connection)
    first = take(pool)  # none free: it makes one, counted in use
    second = take(pool)
    assert first is not second and not pool.can_get_connection()
    with pytest.raises(MaxConnectionsError):  # a ConnectionError, as a failed wait is
        take(pool)
    assert issubclass(MaxConnectionsError, RedisConnectionError)

    async def give_back_and_take() -> tuple[bool, object, bool]:
        await pool.release(first)
        free = bool(pool.can_get_connection())  # (it answers with the pool's own list of free ones)
        again = take(pool)  # the free one, not a new one
        return free, again, bool(pool.can_get_connection())

    free, again, after = asyncio.run(give_back_and_take())
    assert free and again is first and not after


def test_redis_py_s_ensure_connection_connects_a_connection_just_made(redis_url: str) -> None:
    async def main() -> tuple[bool, bool, object]:
        pool = ConnectionPool.from_url(redis_url, max_connections=1)
        connection = take(pool)
        before = connection.is_connected
        await pool.ensure_connection(connection)
        connected = connection.is_connected
        answer = await _ping(connection)
        await pool.release(connection)
        await pool.disconnect()
        return before, connected, answer

    assert asyncio.run(main()) == (False, True, b"PONG")


def test_a_command_waits_out_a_rewrite_of_the_pool_by_a_maintenance_notification(redis_url: str) -> None:
    async def main() -> tuple[bool, object]:
        pool = WaitingPool.from_url(redis_url, max_connections=2)
        async with pool._get_pool_lock():  # as redis-py holds it while it rewrites the pool
            pool.set_in_maintenance(True)
            command = asyncio.ensure_future(pool.get_connection())
            await settled()
            waited = not command.done()
            pool.set_in_maintenance(False)
        connection = await command
        answer = await _ping(connection)
        await pool.release(connection)
        await pool.disconnect()
        return waited, answer

    assert asyncio.run(main()) == (True, b"PONG")


def test_redis_py_tells_the_pool_when_a_moving_notification_rewrites_it_with_its_lock_held(redis_url: str) -> None:
    told: list[tuple[bool, bool]] = []

    class Told(WaitingPool):
        def set_in_maintenance(self, in_maintenance: bool) -> None:
            told.append((in_maintenance, self._get_pool_lock().locked()))
            super().set_in_maintenance(in_maintenance)

    async def main() -> None:
        pool = Told.from_url(redis_url)
        # RESP3 is redis 8's default, and with it maintenance notifications are on unless the server says no.
        assert pool.maint_notifications_enabled()  # type: ignore[no-untyped-call]
        notification = NodeMovingNotification(1, "127.0.0.1", 6379, 15)
        await pool.apply_moving_notification(notification, MaintNotificationsConfig(), moving_address_src=None)

    asyncio.run(main())
    assert told == [(True, True), (False, True)]
