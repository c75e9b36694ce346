"""Floods of bogus credentials against a real ``svcgw serve`` and a real Redis: they never starve real traffic."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from simulator.app import create_app as create_sim
from svcgw.settings import Settings
from tests.receiver.console.conftest import make_developer
from tests.receiver.floods import flood, request
from tests.support import Process, ThreadedServer, free_port, wait_ready_or_stop

POST = orjson.dumps({"event_type": "Msg", "events": [{"id": "flood", "content": "hello"}]})


@pytest.fixture
def sim() -> Iterator[str]:
    server = ThreadedServer(create_sim()).start()
    yield server.base
    server.stop()


@contextlib.contextmanager
def serving(env: dict[str, str], sim: str, **extra: str) -> Iterator[tuple[int, Settings]]:
    """``svcgw serve`` with the simulator as the capability layer: its port and settings."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_env = dict(env, SVCGW_PORT=str(port), SVCGW_PUBLIC_URL=base, SVCGW_UPSTREAM_URL=sim, **extra)
    process = Process(["serve"], server_env, f"serve-{port}").start()
    wait_ready_or_stop(process, base + "/readyz", "the HTTP server")
    try:
        yield port, Settings.from_env(server_env)
    finally:
        process.stop()


@pytest.mark.slow
def test_a_flood_of_bogus_credentials_from_one_address_leaves_real_traffic_from_another_alone(
    env: dict[str, str], sim: str
) -> None:
    # The account's own rate limit is not what this is about.
    with serving(env, sim, SVCGW_RATE_LIMIT="100000/minute") as (port, settings):
        developer = make_developer(settings)
        appid = developer.appids[0]
        base = f"http://127.0.0.1:{port}"
        # 6,000 requests from 127.0.0.1, 400 at once: API-key sign-ins and receiver posts, every credential made up.
        bogus = []
        for number in range(3000):
            sign_in = orjson.dumps({"api_key": "sk_" + secrets.token_urlsafe(32)})
            bogus.append(request("POST", "/console/api/session", sign_in, Content_Type="application/json"))
            target = f"/svc/receiver/{appid}/{secrets.token_urlsafe(24)}"
            bogus.append(request("POST", target, POST, Content_Type="application/json"))

        async def real_traffic(done: asyncio.Event) -> list[tuple[str, int]]:
            """Posts and gateway calls from 127.0.0.2, four clients each one after another, while the flood lasts."""
            answers: list[tuple[str, int]] = []
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
            async with httpx.AsyncClient(base_url=base, timeout=30, transport=transport, trust_env=False) as client:
                await asyncio.gather(*(one_client(client, done, answers) for _ in range(4)))
            return answers

        async def one_client(client: httpx.AsyncClient, done: asyncio.Event, answers: list[tuple[str, int]]) -> None:
            stop = time.monotonic() + 120
            while not done.is_set() and time.monotonic() < stop:
                posted = await client.post(developer.receiver_url("", appid), content=POST)
                answers.append(("post", posted.status_code))
                called = await client.post(
                    "/svc/api/message/sendText",
                    json={"appid": appid, "toWxid": "friend", "content": "hi"},
                    headers={"Svc-Key": developer.key},
                )
                answers.append(("call", called.status_code))

        async def main() -> tuple[list[int], list[tuple[str, int]], float]:
            done = asyncio.Event()
            real = asyncio.ensure_future(real_traffic(done))
            started = time.monotonic()
            try:
                statuses = await flood(port, bogus, at_once=400, source=lambda _: "127.0.0.1", deadline=90)
            finally:
                done.set()
            took = time.monotonic() - started
            return statuses, await real, took

        statuses, answers, took = asyncio.run(main())
    posts = [status for kind, status in answers if kind == "post"]
    calls = [status for kind, status in answers if kind == "call"]
    assert len(posts) >= 8 and len(calls) >= 8, (len(posts), len(calls), took)
    assert set(posts) == {200} and set(calls) == {200}, (sorted(posts), sorted(calls))
    # The flood itself is refused for what it is, never with "storage unavailable".
    assert len(statuses) == 6000 and set(statuses) <= {401, 404, 429}, sorted(set(statuses))
