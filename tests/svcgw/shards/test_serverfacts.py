"""Each shard's Redis settings read from a real server of the test's own, and judged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis as AsyncRedis

from svcgw.shards.clients import ShardRedis
from svcgw.shards.serverfacts import SettingsWatch, ShardReport, check_shards
from svcgw.storage.keys import PLAIN
from svcgw.storage.serverchecks import LOSES_DATA, UNCHECKED
from tests.deploy.redis_nodes import Node, plain_server
from tests.support import free_port

# A redis-server of its own, whose settings the test changes: `-m 'not slow'` skips it.
pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with plain_server(tmp_path / "redis") as started:
        yield started


def _reports(url: str, *, persistence_required: bool = False) -> list[ShardReport]:
    async def read() -> list[ShardReport]:
        client = AsyncRedis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        try:
            return await check_shards([ShardRedis(client, PLAIN)], persistence_required=persistence_required, timeout=5)
        finally:
            await client.aclose()

    return asyncio.run(read())


def _severities(report: ShardReport) -> dict[str, str]:
    return {finding.setting: finding.severity for finding in report.findings}


def test_eviction_with_maxmemory_is_found_on_the_server(node: Node) -> None:
    url = f"redis://{node.address}/0"
    (clean,) = _reports(url)
    assert clean.error is None and _severities(clean) == {"appendonly": "advice"}
    assert _severities(_reports(url, persistence_required=True)[0]) == {"appendonly": LOSES_DATA}
    client = node.client()
    client.config_set("maxmemory", "100mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    (evicting,) = _reports(url)
    assert _severities(evicting) == {"maxmemory-policy": LOSES_DATA, "appendonly": "advice"}
    assert "allkeys-lru" in evicting.harmful[0].problem
    client.close()


def test_a_user_refused_config_gets_unchecked_and_what_info_says(node: Node) -> None:
    admin = node.client()
    admin.config_set("maxmemory", "100mb")
    admin.config_set("maxmemory-policy", "volatile-lru")
    admin.acl_setuser(
        "limited",
        enabled=True,
        passwords=["+limited-password"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-config"],
    )
    admin.close()
    (report,) = _reports(f"redis://limited:limited-password@{node.address}/0")
    assert report.error is None
    assert _severities(report) == {"maxmemory-policy": LOSES_DATA, "CONFIG": UNCHECKED, "appendonly": "advice"}
    unchecked = next(finding for finding in report.findings if finding.setting == "CONFIG")
    assert "CONFIG GET was refused" in unchecked.problem and "limited-password" not in unchecked.problem


def test_a_shard_that_does_not_answer_is_an_error_not_a_finding() -> None:
    (report,) = _reports(f"redis://127.0.0.1:{free_port()}/0")
    assert report.error is not None and report.findings == ()


def test_the_watch_reads_again_once_its_reports_are_old(node: Node) -> None:
    async def run() -> tuple[list[ShardReport], list[ShardReport], list[ShardReport]]:
        client = AsyncRedis.from_url(f"redis://{node.address}/0", socket_connect_timeout=1, socket_timeout=2)
        admin = AsyncRedis.from_url(f"redis://{node.address}/0")
        try:
            watch = SettingsWatch([ShardRedis(client, PLAIN)], persistence_required=False, max_age=3600)
            first = await watch.reports(5)
            await admin.config_set("maxmemory", "100mb")
            await admin.config_set("maxmemory-policy", "allkeys-lfu")
            kept = await watch.reports(5)
            watch.max_age = 0
            again = await watch.reports(5)
            return first, kept, again
        finally:
            await client.aclose()
            await admin.aclose()

    first, kept, again = asyncio.run(run())
    assert first == kept and not first[0].harmful
    assert [finding.setting for finding in again[0].harmful] == ["maxmemory-policy"]
