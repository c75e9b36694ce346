"""Console fixtures: accounts with API keys, the app served in-process, and a signed-in HTTP client."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from receiver.app import create_app
from receiver.ratelimit import RateLimiter
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from svcgw.shards.connections import async_client
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store
from tests.support import ThreadedServer


@dataclass
class Developer:
    account: str
    key: str
    key_id: str
    appids: list[str]
    receiver_tokens: dict[str, str]

    def receiver_url(self, base: str, appid: str | None = None) -> str:
        appid = appid or self.appids[0]
        return f"{base}/svc/receiver/{appid}/{self.receiver_tokens[appid]}"


def new_appid() -> str:
    return "we_" + os.urandom(8).hex()[:15]


def make_developer(settings: Settings, instances: int = 1) -> Developer:
    async def action(store: Store) -> Developer:
        account = await store.create_account("console test", devices=10)
        key, clear = await store.create_key(account.id)
        appids, tokens = [], {}
        for _ in range(instances):
            appid = new_appid()
            tokens[appid] = await store.register_instance(appid, account.id)
            appids.append(appid)
        return Developer(account.id, clear, key.id, appids, tokens)

    return with_store(settings, action)


class ConsoleClient:
    """An httpx client signed in to the console's JSON API, sending the CSRF header on changes."""

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=15)
        answer = self.http.post("/console/api/session", json={"api_key": key})
        assert answer.status_code == 200, answer.text
        self.csrf: str = answer.json()["data"]["csrf_token"]
        self.account: str = answer.json()["data"]["account"]

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return self.http.get("/console/api" + path, **kwargs)

    def change(self, method: str, path: str, json: object | None = None, csrf: bool = True) -> httpx.Response:
        headers = {"X-CSRF-Token": self.csrf} if csrf else {}
        return self.http.request(method, "/console/api" + path, json=json, headers=headers)

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def developer(settings: Settings) -> Developer:
    return make_developer(settings, instances=2)


@pytest.fixture
def stranger(settings: Settings) -> Developer:
    return make_developer(settings, instances=1)


@pytest.fixture
def console(server: str, developer: Developer) -> Iterator[ConsoleClient]:
    client = ConsoleClient(server, developer.key)
    yield client
    client.close()


def gateway_call(settings: Settings, account: str) -> bool:
    """One call counted for the account exactly as the gateway counts it; whether it may go ahead."""

    async def hit() -> bool:
        redis = async_client(settings, decode=True)
        try:
            return (await RateLimiter(redis, keys, settings.rate_limit).hit(account)).allowed
        finally:
            await redis.aclose()

    return asyncio.run(hit())


@contextlib.contextmanager
def serve(settings: Settings) -> Iterator[str]:
    """The HTTP app of ``settings`` served by uvicorn in a thread of the test process, on a free loopback port."""
    server = ThreadedServer(create_app(settings)).start()
    try:
        yield server.base
    finally:
        server.stop()

