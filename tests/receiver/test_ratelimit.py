"""The moving-window rate limit, against a real Redis, with time driven by the test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis as AsyncRedis

from receiver.ratelimit import RateLimiter
from svcgw.storage.keys import PLAIN as keys


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _async_redis(redis_url: str) -> AsyncRedis:
    return AsyncRedis.from_url(redis_url, decode_responses=True)


def test_moving_window_counts_refused_calls_and_tells_an_honest_wait(redis_url: str) -> None:
    async def scenario() -> list[Any]:
        client = _async_redis(redis_url)
        clock = FakeClock()
        try:
            limiter = RateLimiter(client, keys, "3/2second", clock=clock)
            first = [await limiter.hit("acc_a") for _ in range(3)]
            refused = await limiter.hit("acc_a")
            other = await limiter.hit("acc_b")
            clock.advance(refused.retry_after - 0.3)
            still = await limiter.hit("acc_a")  # too early, and it counts
            clock.advance(still.retry_after)
            after = await limiter.hit("acc_a")
            return [first, refused, other, still, after]
        finally:
            await client.aclose()

    first, refused, other, still, after = asyncio.run(scenario())
    assert all(v.allowed for v in first)
    assert not refused.allowed and refused.retry_after == 2
    assert other.allowed
    assert not still.allowed and still.retry_after >= 1
    assert after.allowed


def test_several_limits_are_all_enforced(redis_url: str) -> None:
    async def scenario() -> list[bool]:
        client = _async_redis(redis_url)
        clock = FakeClock()
        try:
            limiter = RateLimiter(client, keys, "2/second;3/minute", clock=clock)
            allowed = []
            for _ in range(2):
                allowed.append((await limiter.hit("acc")).allowed)
            allowed.append((await limiter.hit("acc")).allowed)
            clock.advance(1.05)
            allowed.append((await limiter.hit("acc")).allowed)  # the minute window is full now
            return allowed
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == [True, True, False, False]


def test_the_redis_clock_is_the_default(redis_url: str) -> None:
    """Without a clock the script reads Redis TIME; calls in one window are counted together."""

    async def scenario() -> list[bool]:
        client = _async_redis(redis_url)
        try:
            limiter = RateLimiter(client, keys, "2/minute")
            return [(await limiter.hit("acc")).allowed for _ in range(3)]
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == [True, True, False]


def test_rate_limit_needs_a_positive_amount(redis_url: str) -> None:
    async def build() -> None:
        client = _async_redis(redis_url)
        try:
            RateLimiter(client, keys, "0/second")
        finally:
            await client.aclose()

    with pytest.raises(ValueError):
        asyncio.run(build())
