"""The receiver's table of answers to a post that was not stored."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from starlette.types import Message

from receiver.credentialguard import Throttled
from receiver.endpoint import codes as receiver_codes
from receiver.endpoint.receive import Endpoint, direct_post, refused
from receiver.http import BadContentLength, BodyTooLarge
from svcgw.config.settings import Settings
from svcgw.intake.envelope import EnvelopeError
from svcgw.intake.ingest import ReplicaNotConfirmed, UnknownReceiver
from svcgw.storage.keys import PLAIN
from svcgw.storage.layoutversion import LayoutError
from tests.conftest import provision


@pytest.mark.parametrize(
    ("raised", "status", "code", "message", "retry_after"),
    [
        (BadContentLength(), 400, -400, "invalid Content-Length", None),
        (BodyTooLarge(1024), 413, -413, "the body is larger than 1024 bytes", None),
        (EnvelopeError("event_type must be a string", 422), 422, -422, "event_type must be a string", None),
        (EnvelopeError("the body is not valid JSON"), 400, -400, "the body is not valid JSON", None),
        (UnknownReceiver("we_x"), 404, -404, receiver_codes.RECEIVER_NOT_FOUND.message, None),
        (Throttled(4), 429, -429, receiver_codes.RECEIVER_LIMITED.message, "4"),
        (RedisConnectionError("down"), 503, -50002, receiver_codes.RECEIVER_UNAVAILABLE.message, "1"),
        (RedisClusterException("no node"), 503, -50002, receiver_codes.RECEIVER_UNAVAILABLE.message, "1"),
        (ReplicaNotConfirmed("1 of 2"), 503, -50002, receiver_codes.RECEIVER_UNAVAILABLE.message, "1"),
        (LayoutError("layout 9"), 503, -50002, receiver_codes.RECEIVER_UNAVAILABLE.message, "1"),
    ],
)
def test_every_refused_post_has_its_row(
    raised: Exception, status: int, code: int, message: str, retry_after: str | None
) -> None:
    response = refused(raised)
    assert response.status_code == status
    assert orjson.loads(response.body) == {"code": code, "message": message, "data": None}
    assert response.headers.get("retry-after") == retry_after


class _Refusing:
    """An ingest whose every post meets ``error``; it counts as the real one does, in memory."""

    settings = Settings.from_env({"SVCGW_REDIS_URL": "redis://127.0.0.1:6379/0"})
    keys = PLAIN

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.counts = _Counts()

    async def check_receiver(self, appid: str, token: str) -> None:
        return None

    async def accept(self, appid: str, token: str, body: bytes) -> None:
        raise self.error


class _Counts:
    def __init__(self) -> None:
        self.fields = Counter[str]()

    def add(self, commands: Any) -> None:
        for _, _, name, amount in commands:
            self.fields[name] += int(amount)


def _post_to(endpoint: Endpoint, appid: str, token: str) -> int:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": f"/svc/receiver/{appid}/{token}", "headers": [],
             "client": ("127.0.0.1", 1)}  # fmt: skip
    asyncio.run(endpoint.direct(scope, receive, send, appid, token))
    return int(sent[0]["status"])


@pytest.mark.parametrize(
    ("error", "level", "line"),
    [
        (LayoutError("the layout marker names layout 9"), "ERROR", "LayoutError: the layout marker names layout 9"),
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:7001."), "WARNING",
         "ConnectionError: Error 111 connecting to 127.0.0.1:7001."),
        (RedisClusterException("ERROR: Calling pipelined function evalsha is blocked"), "WARNING",
         "RedisClusterException: ERROR: Calling pipelined function evalsha is blocked"),
    ],
)  # fmt: skip
def test_a_post_redis_did_not_store_is_logged_once_with_its_cause_and_counted(
    error: Exception, level: str, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    ingest = _Refusing(error)
    counts = ingest.counts
    endpoint = Endpoint([ingest], _Admit())  # type: ignore[list-item]
    with caplog.at_level(logging.INFO, logger="svcgw.receiver"):
        assert [_post_to(endpoint, "we_1", "0tok") for _ in range(3)] == [503] * 3
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (level, f"post not stored, answered 503: {line}")
    ]
    assert caplog.records[0].__dict__["shard"] == 0 and caplog.records[0].__dict__["appid"] == "we_1"
    assert counts.fields == {f"posts_not_stored|{type(error).__name__}": 3}


def test_a_refusal_that_is_no_storage_error_is_neither_logged_nor_counted(caplog: pytest.LogCaptureFixture) -> None:
    ingest = _Refusing(EnvelopeError("the body is not valid JSON"))
    counts = ingest.counts
    endpoint = Endpoint([ingest], _Admit())  # type: ignore[list-item]
    with caplog.at_level(logging.INFO, logger="svcgw.receiver"):
        assert _post_to(endpoint, "we_1", "0tok") == 400
    assert caplog.records == [] and counts.fields == {}


# --- the direct lane: a post on a plain path is answered without the router and middleware ------
def test_only_plain_receiver_posts_skip_the_router() -> None:
    def scope(path: str, method: str = "POST", raw: bytes | None = None) -> dict[str, object]:
        return {"type": "http", "method": method, "path": path, "raw_path": raw or path.encode()}

    assert direct_post(scope("/svc/receiver/we_1/0Ab-c_d")) == ("we_1", "0Ab-c_d")
    # Another shard's token (s<i>.<secret>): its one dot is the shard's.
    assert direct_post(scope("/svc/receiver/we_1/s3.0Ab-c_d")) == ("we_1", "s3.0Ab-c_d")
    assert direct_post(scope("/svc/receiver/we_1/s999999.x")) == ("we_1", "s999999.x")
    for routed in (
        scope("/svc/receiver/we_1/tok", "GET"),
        scope("/svc/receiver/we_1/tok/"),
        scope("/svc/receiver/we_1/tok/more"),
        scope("/svc/receiver/we_1/./tok"),
        scope("/svc/receiver/we.1/tok"),
        scope("/svc/receiver/we_1/s3.tok.more"),
        scope("/svc/receiver/we_1/s03.tok"),
        scope("/svc/receiver/we_1/s1234567.tok"),
        scope("/svc/receiver/we_1/s3."),
        scope("/svc/receiver/we_1/.tok"),
        scope("/svc/receiver/we_1/x3.tok"),
        scope("/svc/receiver/we_1/tok", raw=b"/svc/receiver/we_1/%74ok"),
        scope("/svc/receiver//tok"),
        {"type": "websocket", "path": "/svc/receiver/we_1/tok"},
    ):
        assert direct_post(routed) is None


def test_a_post_gets_the_same_answer_with_or_without_the_router(settings: Settings, server: str) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"same"}]}'
    plain = tenant.receiver_url(server)
    appid, token = plain.rsplit("/", 2)[-2:]
    # An encoded letter reads the same to the router, but is no plain path: it takes the router.
    routed = f"{server}/svc/receiver/{appid}/%{ord(token[0]):02X}{token[1:]}"
    answers = {}
    for name, url in (("plain", plain), ("routed", routed), ("wrong token", plain + "x")):
        answer = httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=10)
        answers[name] = (answer.status_code, answer.json(), answer.headers["x-content-type-options"])
    assert answers["plain"] == (200, {"code": 0, "message": "ok", "data": {"accepted": 1, "duplicates": 0}}, "nosniff")
    assert answers["routed"] == (200, {"code": 0, "message": "ok", "data": {"accepted": 0, "duplicates": 1}}, "nosniff")
    assert answers["wrong token"][0] == 404 and answers["wrong token"][2] == "nosniff"


class _Admit:
    async def check(self, address: str, key: str, look_up: Callable[[], Awaitable[bool | None]]) -> bool:
        return True


class _Broken:
    settings = Settings.from_env({"SVCGW_REDIS_URL": "redis://127.0.0.1:6379/0"})

    async def accept(self, appid: str, token: str, body: bytes) -> None:
        raise RuntimeError("a fault no row answers")


def test_an_error_no_row_answers_is_a_500_with_nosniff_raised_on_to_the_server() -> None:
    endpoint = Endpoint([_Broken()], _Admit())  # type: ignore[list-item]
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/svc/receiver/we_1/0tok",
        "headers": [],
        "client": ("127.0.0.1", 1),
    }
    with pytest.raises(RuntimeError):
        asyncio.run(endpoint.direct(scope, receive, send, "we_1", "0tok"))
    assert sent[0]["status"] == 500 and (b"x-content-type-options", b"nosniff") in sent[0]["headers"]
    assert sent[1]["body"] == b"Internal Server Error"
