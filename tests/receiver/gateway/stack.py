"""The gateway stack of the integration tests: the HTTP app with the simulator as upstream, a real Redis.

Both servers run in the test process behind real HTTP servers on loopback
(``tests.support.ThreadedServer``): request targets reach the app exactly
as written, and the simulator posts events back to the receiver URLs.
``start_stack(..., subprocess=True)`` runs ``svcgw serve`` instead, for the
end-to-end cases.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from receiver.app import create_app
from receiver.ratelimit import Clock
from receiver.services import build_services
from simulator.app import create_app as create_sim
from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from tests.conftest import with_store
from tests.support import Process, ThreadedServer, free_port, wait_ready_or_stop

JSON_HEADERS = {"Content-Type": "application/json"}
BIG = 1688850000000001234  # 19 digits, beyond a double's exact range


# --- servers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    """The capability-layer simulator, in-process behind a real HTTP server, shared by the module."""
    server = ThreadedServer(create_sim()).start()
    yield server.base
    server.stop()


@dataclass
class Stack:
    base: str
    sim: str
    settings: Settings
    process: ThreadedServer | Process
    client: httpx.Client

    # --- accounts ---------------------------------------------------------
    def account(self, devices: int | None = 10, valid_until: str | None = None) -> tuple[str, str]:
        """A new account and one API key for it."""

        async def action(store: Store) -> tuple[str, str]:
            account = await store.create_account("gateway test", devices=devices, valid_until=valid_until)
            _, key = await store.create_key(account.id)
            return account.id, key

        return with_store(self.settings, action)

    def store(self, action: Any) -> Any:
        return with_store(self.settings, action)

    # --- calls ------------------------------------------------------------
    def post(
        self, path: str, body: bytes | dict[str, Any] | list[Any], key: str | None = None, **headers: str
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = dict(JSON_HEADERS)
        if key is not None:
            sent["Svc-Key"] = key
        sent.update({name.replace("_", "-"): value for name, value in headers.items()})
        return self.client.post(self.base + path, content=content, headers=sent)

    def api(self, key: str, operation: str, body: dict[str, Any] | bytes) -> httpx.Response:
        return self.post(f"/svc/api/{operation}", body, key)

    def create_device(self, key: str) -> str:
        answer = self.api(key, "device/create", {"appid": "", "type": "iPad", "name": "t", "version": 0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["code"] == 0, answer.text
        return str(answer.json()["data"]["appid"])

    def login(self, key: str, appid: str, proxy: str = "") -> None:
        """QR login through the gateway: the simulator confirms on the third poll."""
        qr = self.api(key, "login/getQr", {"appid": appid, "proxy": proxy}).json()
        assert qr["code"] == 0, qr
        for _ in range(5):
            answer = self.api(key, "login/checkQr", {"appid": appid, "proxy": proxy, "uuid": qr["data"]["uuid"]})
            if answer.json()["data"]["status"] == 2:
                return
        raise AssertionError("login did not complete")

    # --- the simulator ----------------------------------------------------
    def sim_instance(self, appid: str) -> dict[str, Any]:
        answer = self.client.get(f"{self.sim}/_sim/instances/{appid}")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def sim_faults(self, **faults: Any) -> None:
        answer = self.client.post(f"{self.sim}/_sim/faults", json=faults)
        assert answer.status_code == 200, answer.text

    def sim_seed(self, appid: str, *, connected: bool = True) -> None:
        answer = self.client.post(f"{self.sim}/_sim/instances", json={"appid": appid, "connected": connected})
        assert answer.status_code == 201, answer.text

    def own(self, account: str, appid: str) -> None:
        """Register an appid under the account directly, as device/create would."""

        async def action(store: Store) -> None:
            await store.register_instance(appid, account)

        self.store(action)

    def forward_address(self, appid: str) -> str | None:
        async def action(store: Store) -> str | None:
            return (await store.get_callback(Scope(appid=appid))).url

        return self.store(action)  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.client.close()
        self.process.stop()

    def receiver_url(self, appid: str) -> str:
        async def action(store: Store) -> str:
            return await store.receiver_token(appid)

        return f"{self.base}/svc/receiver/{appid}/{self.store(action)}"


def start_stack(
    env: dict[str, str], sim: str, *, subprocess: bool = False, clock: Clock | None = None, **extra: str
) -> Stack:
    """The HTTP app with the simulator as upstream: in-process, or as ``svcgw serve`` if ``subprocess``.

    ``clock`` drives the rate limit of the in-process app instead of the Redis server's clock.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_env = dict(env, SVCGW_PORT=str(port), SVCGW_PUBLIC_URL=base, SVCGW_UPSTREAM_URL=sim, **extra)
    settings = Settings.from_env(server_env)
    process: ThreadedServer | Process
    if subprocess:
        process = Process(["serve"], server_env, f"gateway-{port}").start()
        wait_ready_or_stop(process, base + "/readyz", "the gateway")
    else:
        app = create_app(settings, services=build_services(settings, clock=clock))
        process = ThreadedServer(app, port).start()
    client = httpx.Client(timeout=15, trust_env=False)
    return Stack(base, sim, settings, process, client)


@pytest.fixture
def stack(env: dict[str, str], sim: str) -> Iterator[Stack]:
    running = start_stack(env, sim)
    yield running
    running.stop()


def error(answer: httpx.Response) -> tuple[int, int]:
    body = answer.json()
    assert set(body) == {"code", "message", "data"} and body["data"] is None, answer.text
    assert answer.headers["content-type"] == "application/json"
    return answer.status_code, body["code"]


def raw_post(base: str, target: str, key: str, body: bytes = b'{"appid":"x"}') -> tuple[int, dict[str, Any]]:
    """POST with the request target exactly as written (no client-side normalisation)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", target, body=body, headers={"Svc-Key": key, **JSON_HEADERS})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def without_time(raw: bytes) -> bytes:
    return re.sub(rb'"time":"[^"]*"', b'"time":""', raw)
