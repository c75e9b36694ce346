"""Bodies sent before signing in: a few KB at most, refused early, handed on whole when small."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from starlette.exceptions import StarletteDeprecationWarning
from starlette.requests import ClientDisconnect

from receiver.app import create_app
from receiver.openbodies import OPEN_BODY_BYTES, OpenBodyLimit, is_open
from svcgw.config.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

TOO_LARGE = {
    "code": -41300,
    "message": f"a body sent before signing in has at most {OPEN_BODY_BYTES} bytes",
    "data": None,
}


def test_the_open_routes_are_sign_in_and_invitations() -> None:
    for path in ("/console/login", "/console/api/session", "/console/api/invitation", "/console/invitation/abc"):
        assert is_open("POST", path), path
    assert not is_open("GET", "/console/login")
    for path in ("/console/api/callback", "/svc/api/device/create", "/console/keys", "/console/invitation"):
        assert not is_open("POST", path), path


class Downstream:
    """The route behind the limit: what it was handed, and how many messages the server was asked for."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.received = [await receive()]
        if scope["path"] == "/console/api/session":
            self.received.append(await receive())  # waits for the disconnect, as Starlette may
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def call(
    path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[Downstream, list[Any], int]:
    """``chunks`` posted to ``path`` through the limit: the route, what was sent back, messages read from the server."""
    downstream = Downstream()
    pending = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks]
    pending.append({"type": "http.request", "body": b"", "more_body": False})
    pending.append({"type": "http.disconnect"})
    asked = 0
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return pending.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers or []}
    asyncio.run(OpenBodyLimit(downstream)(scope, receive, send))
    return downstream, sent, asked


def refused(sent: list[Any]) -> bool:
    start, body = sent
    headers = dict(start["headers"])
    return bool(
        start["status"] == 413
        and headers[b"connection"] == b"close"
        and headers[b"content-type"] == b"application/json"
        and orjson.loads(body["body"]) == TOO_LARGE
    )


def test_a_declared_size_over_the_cap_is_refused_before_anything_is_read() -> None:
    declared = [(b"content-length", b"%d" % (OPEN_BODY_BYTES + 1))]
    downstream, sent, asked = call("/console/api/session", [b"x" * 10], declared)
    assert refused(sent) and asked == 0 and downstream.received is None


def test_a_body_growing_past_the_cap_is_refused_once_it_is_over() -> None:
    chunks = [b"x" * 1024] * 64  # 64 KiB, chunked: no Content-Length
    downstream, sent, asked = call("/console/invitation/some-token", chunks)
    assert refused(sent) and asked == OPEN_BODY_BYTES // 1024 + 1 and downstream.received is None


def test_a_small_body_is_handed_on_whole_and_the_disconnect_after_it() -> None:
    chunks = [b'{"login":', b'"a@example.com",', b'"password":"secret"}']
    downstream, sent, _ = call("/console/api/session", chunks, [(b"content-length", b"48")])
    assert downstream.received == [
        {"type": "http.request", "body": b"".join(chunks), "more_body": False},
        {"type": "http.disconnect"},
    ]
    assert sent[0]["status"] == 200


def test_a_client_leaving_before_its_body_is_in_is_a_disconnect_as_the_route_would_see() -> None:
    downstream = Downstream()

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        raise AssertionError("nothing is sent to a client that left")

    scope = {"type": "http", "method": "POST", "path": "/console/login", "headers": []}
    with pytest.raises(ClientDisconnect):
        asyncio.run(OpenBodyLimit(downstream)(scope, receive, send))
    assert downstream.received is None


def test_other_routes_are_untouched() -> None:
    chunks = [b"x" * 1024] * 64
    downstream, _, asked = call("/console/api/callback", chunks)
    assert downstream.received == [{"type": "http.request", "body": chunks[0], "more_body": True}] and asked == 1


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        yield http


def test_the_app_refuses_a_large_sign_in_but_reads_an_ordinary_one(client: TestClient) -> None:
    large = {"login": "a@example.com", "password": "p" * 200, "padding": "x" * OPEN_BODY_BYTES}
    answer = client.post("/console/api/session", json=large)
    assert answer.status_code == 413 and answer.json() == TOO_LARGE
    assert answer.headers["x-content-type-options"] == "nosniff"
    form = client.post("/console/login", data={"login": "a@example.com", "password": "p" * (OPEN_BODY_BYTES + 1)})
    assert form.status_code == 413 and form.json() == TOO_LARGE
    # A sign-in of the largest password there is still gets its answer (a refused sign-in here).
    ordinary = client.post("/console/api/session", json={"login": "nobody@example.com", "password": "\U0001f600" * 256})
    assert ordinary.status_code == 401, ordinary.text
