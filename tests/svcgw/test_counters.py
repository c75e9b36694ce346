"""svcgw.counters: buffered counts are written with the client lent to them, which they leave open."""

from __future__ import annotations

import asyncio

import fakeredis

from svcgw.config.settings import Settings
from svcgw.counters import BufferedCounts
from svcgw.storage.keys import PLAIN


def test_counts_are_written_with_the_lent_client_and_it_stays_open() -> None:
    async def scenario() -> None:
        lent = fakeredis.FakeAsyncRedis()
        counts = BufferedCounts(Settings.from_env({"SVCGW_REDIS_URL": "redis://127.0.0.1:9/0"}), PLAIN)
        counts.lend(lent)
        counts.add([("HINCRBY", "svcgw:test:counts", "posts", 2), ("HINCRBY", "svcgw:test:counts", "posts", 3)])
        await counts.aclose()  # a last write, and no client of its own to close
        assert await lent.hget("svcgw:test:counts", "posts") == b"5"
        assert await lent.ping()  # still open: the lender closes it

    asyncio.run(scenario())


def test_a_client_once_open_is_kept_and_the_given_one_is_not_replaced() -> None:
    async def scenario() -> None:
        given, other = fakeredis.FakeAsyncRedis(), fakeredis.FakeAsyncRedis()
        counts = BufferedCounts(Settings.from_env({"SVCGW_REDIS_URL": "redis://127.0.0.1:9/0"}), PLAIN, given)
        counts.lend(other)
        counts.add([("HINCRBYFLOAT", "svcgw:test:counts", "seconds", 0.5)])
        await counts.aclose()
        assert await given.hget("svcgw:test:counts", "seconds") == b"0.5"
        assert await other.hget("svcgw:test:counts", "seconds") is None

    asyncio.run(scenario())
