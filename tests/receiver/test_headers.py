"""``X-Content-Type-Options: nosniff`` on every answer of the app, added without buffering a body."""

from __future__ import annotations

import asyncio

from starlette.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from receiver.app import create_app
from receiver.headers import NoSniff
from svcgw.config.settings import Settings


def test_every_part_of_the_app_answers_with_nosniff(settings: Settings) -> None:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        answers = {
            "healthz": client.get("/healthz"),
            "readyz": client.get("/readyz"),
            "metrics": client.get("/metrics"),
            "openapi": client.get("/openapi.json"),
            "receiver": client.post("/svc/receiver/we_nosuch/notatoken", content=b"{}"),
            "gateway": client.post("/svc/api/message/sendText", json={"appid": "we_x"}),
            "path guard": client.post("/svc/api/message/sendText/../x", json={}),
            "console page": client.get("/console/login"),
            "console redirect": client.get("/console/instances"),
            "console api": client.get("/console/api/session"),
            "console static": client.get("/console/static/console.css"),
            "not found": client.get("/nowhere"),
        }
    for name, answer in answers.items():
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], name


def run_through(app: NoSniff) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send))
    return sent


def test_the_header_is_added_once_and_bodies_stream_through() -> None:
    seen_by_client: list[int] = []

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one", b"two"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            # Each part has reached the client before the app goes on: nothing is held back.
            seen_by_client.append(len(sent))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    sent: list[Message] = []

    async def main() -> None:
        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await NoSniff(streaming)({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send)

    asyncio.run(main())
    assert sent[0]["headers"] == [(b"content-type", b"text/plain"), (b"x-content-type-options", b"nosniff")]
    assert [m.get("body") for m in sent[1:]] == [b"one", b"two", b""]
    assert seen_by_client == [2, 3]

    async def own_header(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"X-Content-Type-Options", b"nosniff")]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    (start, _body) = run_through(NoSniff(own_header))
    assert start["headers"] == [(b"X-Content-Type-Options", b"nosniff")]
