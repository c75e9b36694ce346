"""The layout marker: decided once from the server's version, read by every process, obeyed by the ingest."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.intake.ingest import Ingest
from svcgw.storage import layoutversion
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.layoutversion import BUCKETS, HEXPIRE, Layout, LayoutError, Server
from tests.conftest import provision
from tests.support import free_port

REDIS_7_0 = {"redis_version": "7.0.15"}
VALKEY_9 = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}


@pytest.mark.parametrize(
    ("info", "field_expiry", "hsetex"),
    [
        (REDIS_7_0, False, False),
        ({"redis_version": "7.2.4"}, False, False),
        ({"redis_version": "7.4.0"}, True, False),
        ({"redis_version": "8.0.2"}, True, True),
        ({"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.1"}, False, False),
        (VALKEY_9, True, True),  # Valkey says 7.2.4 as redis_version: its own version decides
    ],
)
def test_what_a_server_allows_comes_from_its_version(info: dict[str, str], field_expiry: bool, hsetex: bool) -> None:
    server = Server.from_info(info)
    assert (server.field_expiry, server.hsetex) == (field_expiry, hsetex)
    assert layoutversion.first_marker(server, 1795645968.7)["dedup"] == (HEXPIRE if field_expiry else BUCKETS)


def test_the_first_marker() -> None:
    assert layoutversion.first_marker(Server.from_info(VALKEY_9), 1795645968.7) == {
        "version": "2",
        "since": "1795645968",
        "dedup": "hexpire",
    }
    # A deployment that starts on this layout has nothing of an earlier one to look for.
    assert layoutversion.first_marker(Server.from_info(VALKEY_9), 1795645968.7, earlier_data=False)["since"] == "0"


def test_a_marker_this_version_cannot_follow_is_refused() -> None:
    redis70, valkey = Server.from_info(REDIS_7_0), Server.from_info(VALKEY_9)
    assert layoutversion.parse({b"version": b"2", b"since": b"5"}, valkey) is None  # not written yet
    written = {b"version": b"2", b"since": b"5", b"dedup": b"buckets"}
    assert layoutversion.parse(written, valkey) == Layout(2, 5, BUCKETS)
    for fields, server in [
        ({"version": "3", "since": "5", "dedup": "buckets"}, valkey),
        ({"version": "2", "since": "x", "dedup": "buckets"}, valkey),
        ({"version": "2", "since": "5", "dedup": "other"}, valkey),
        # The deployment chose per-field expiry; a server without it cannot keep that window.
        ({"version": "2", "since": "5", "dedup": "hexpire"}, redis70),
    ]:
        with pytest.raises(LayoutError):
            layoutversion.parse(dict(fields), server)


def _read(url: str, now: float | None = None) -> tuple[Layout, Server]:
    async def main() -> tuple[Layout, Server]:
        client = AsyncRedis.from_url(url)
        try:
            return await layoutversion.read(client, keys, now=now)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_the_first_start_writes_the_mode_its_server_allows(redis_url: str, valkey_url: str) -> None:
    before = int(time.time())
    with Redis.from_url(redis_url) as client:
        client.delete(keys.instances)
    marker = _read(redis_url)[0]
    assert marker.dedup == BUCKETS and marker.since == 0  # the tests' Redis 7.0, a deployment without data
    with Redis.from_url(valkey_url) as client:
        client.sadd(keys.instances, "we_registered_before")  # an earlier version's data
    marker, server = _read(valkey_url)
    assert marker.dedup == HEXPIRE and server.hsetex
    assert before <= marker.since <= time.time()
    with Redis.from_url(valkey_url) as client:
        written = client.hgetall(keys.layout)
        assert before <= int(written.pop(b"tags")) <= time.time()  # nothing of before to rename
        assert written == {
            b"version": b"2",
            b"since": str(marker.since).encode(),
            b"dedup": b"hexpire",
        }


def test_the_marker_is_written_once_and_every_process_reads_the_same(valkey_url: str) -> None:
    with Redis.from_url(valkey_url) as client:
        client.sadd(keys.instances, "we_registered_before")

    async def main() -> list[Layout]:
        clients = [AsyncRedis.from_url(valkey_url) for _ in range(8)]
        try:
            # Eight processes starting at once, each with its own clock.
            found = await asyncio.gather(*(layoutversion.read(c, keys, now=1000.0 + i) for i, c in enumerate(clients)))
        finally:
            for client in clients:
                await client.aclose()
        return [marker for marker, _ in found]

    first = asyncio.run(main())
    assert len(set(first)) == 1 and first[0].since in range(1000, 1008)
    # A later start keeps it, whatever its clock.
    assert _read(valkey_url, now=5000.0)[0] == first[0]


def test_the_ingest_obeys_the_marker_not_the_server(env: dict[str, str], valkey_url: str) -> None:
    """A deployment that started on buckets keeps them on a server that has HEXPIRE."""
    settings = Settings.from_env(dict(env, SVCGW_REDIS_URL=valkey_url))
    tenant = provision(settings)
    with Redis.from_url(valkey_url) as client:
        client.hset(keys.layout, mapping={"version": 2, "since": 0, "dedup": "buckets"})
        body = b'{"event_type":"Msg","events":[{"id":"once"}]}'

        async def post() -> tuple[int, int]:
            redis = AsyncRedis.from_url(valkey_url)
            try:
                result = await Ingest(redis, keys, settings).accept(tenant.appid, tenant.receiver_token, body)
            finally:
                await redis.aclose()
            return result.accepted, result.duplicates

        assert asyncio.run(post()) == (1, 0)
        assert asyncio.run(post()) == (0, 1)
        assert client.exists(keys.dedup_container(tenant.appid)) == 0
        assert len(client.keys(keys.dedup_container(tenant.appid) + ":*")) == 1
        written = client.hgetall(keys.layout)
        assert written.pop(b"tags") and written == {b"version": b"2", b"since": b"0", b"dedup": b"buckets"}


def test_a_hexpire_marker_on_a_server_without_it_stops_the_ingest(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    redis.hset(keys.layout, mapping={"version": 2, "since": 0, "dedup": "hexpire"})

    async def post() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await Ingest(client, keys, settings).accept(
                tenant.appid, tenant.receiver_token, b'{"event_type":"M","events":[{}]}'
            )
        finally:
            await client.aclose()

    with pytest.raises(LayoutError, match=r"Redis 7\.4 or Valkey 9"):
        asyncio.run(post())
    assert redis.exists(keys.callback_log(tenant.appid)) == 0


def test_the_receiver_answers_503_and_says_why(
    settings: Settings, server: str, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = provision(settings)
    redis.hset(keys.layout, mapping={"version": 3, "since": 0, "dedup": "buckets"})
    with caplog.at_level(logging.ERROR, logger="svcgw.receiver"):
        answer = httpx.post(tenant.receiver_url(server), content=b'{"event_type":"M","events":[{"id":"x"}]}')
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    (line,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "LayoutError: the data is in key layout 3" in line.getMessage()
    assert redis.exists(keys.callback_log(tenant.appid)) == 0


def test_a_process_start_marks_a_new_deployment_and_a_redis_not_yet_up_does_not_stop_it(redis_url: str) -> None:
    async def start(url: str) -> None:
        client = AsyncRedis.from_url(url, socket_connect_timeout=1)
        try:
            await layoutversion.mark_at_start(client, keys)
        finally:
            await client.aclose()

    asyncio.run(start(redis_url))
    with Redis.from_url(redis_url) as client:
        # Written before any instance was registered: nothing of an earlier layout to look for.
        assert client.hget(keys.layout, "since") == b"0"
    asyncio.run(start(f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens there: logged, not raised
