"""The shared HTTP helpers: the body reader, the API key, JSON answers; and their users in-process."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import orjson
import pytest
from starlette.exceptions import StarletteDeprecationWarning
from starlette.requests import Request

from receiver import plaincodes as plain_codes
from receiver.app import create_app
from receiver.gateway import codes as gateway_codes
from receiver.http import (
    BadContentLength,
    BodyTooLarge,
    ConflictingKeys,
    json_answer,
    presented_key,
    read_body,
)
from svcgw.config.settings import Settings
from tests.receiver.console.conftest import make_developer

with warnings.catch_warnings():
    # The pinned dependencies carry httpx, which starlette's test client still supports but flags.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def _request(headers: list[tuple[str, str]], chunks: list[bytes] | None = None) -> Request:
    pending = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks or []]
    pending.append({"type": "http.request", "body": b"", "more_body": False})

    async def receive() -> dict[str, object]:
        return pending.pop(0)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers],
    }
    return Request(scope, receive)


def _read(headers: list[tuple[str, str]], chunks: list[bytes], limit: int, **options: bool) -> bytes:
    return asyncio.run(read_body(_request(headers, chunks), limit, **options))


# --- the body ---------------------------------------------------------------------------


def test_body_within_the_limit_is_read_whole() -> None:
    assert _read([("content-length", "6")], [b"abc", b"def"], 6) == b"abcdef"


def test_received_size_over_the_limit_is_refused() -> None:
    with pytest.raises(BodyTooLarge, match="the body is larger than 5 bytes"):
        _read([], [b"abc", b"def"], 5)


def test_declared_size_over_the_limit_is_refused_before_reading() -> None:
    with pytest.raises(BodyTooLarge):
        _read([("content-length", "99")], [], 5)
    # Only the received size counts when the declared one is not to be checked.
    assert _read([("content-length", "99")], [b"abc"], 5, check_declared=False) == b"abc"


def test_a_content_length_that_is_not_a_number() -> None:
    with pytest.raises(BadContentLength, match="invalid Content-Length"):
        _read([("content-length", "ten")], [b"abc"], 5, strict=True)
    assert _read([("content-length", "ten")], [b"abc"], 5) == b"abc"


# --- the API key ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ([("Svc-Key", " sk_a ")], "sk_a"),
        ([("X-Svc-Key", "sk_a")], "sk_a"),
        ([("Authorization", "Bearer sk_a")], "sk_a"),
        ([("Authorization", "bearer  sk_a ")], "sk_a"),
        ([("Svc-Key", "sk_a"), ("X-Svc-Key", "sk_a"), ("Authorization", "Bearer sk_a")], "sk_a"),
        ([("Svc-Key", "sk_a"), ("Svc-Key", "sk_a")], "sk_a"),
        ([], None),
        ([("Svc-Key", " ")], None),
        ([("Authorization", "Basic abc")], None),
    ],
)
def test_presented_key(headers: list[tuple[str, str]], key: str | None) -> None:
    assert presented_key(_request(headers)) == key


@pytest.mark.parametrize(
    "headers",
    [
        [("Svc-Key", "sk_a"), ("X-Svc-Key", "sk_b")],
        [("Svc-Key", "sk_a"), ("Authorization", "Bearer sk_b")],
        [("Svc-Key", "sk_a"), ("Svc-Key", "sk_b")],
        [("Svc-Key", ""), ("Authorization", "Bearer sk_b")],
    ],
)
def test_different_keys_conflict(headers: list[tuple[str, str]]) -> None:
    with pytest.raises(ConflictingKeys):
        presented_key(_request(headers))


def test_json_answer() -> None:
    answer = json_answer(0, "ok", {"n": 1}, status=201)
    assert answer.status_code == 201 and answer.media_type == "application/json"
    assert orjson.loads(answer.body) == {"code": 0, "message": "ok", "data": {"n": 1}}


# --- their users, in-process ------------------------------------------------------------


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        yield http


def test_console_and_gateway_refuse_conflicting_keys_alike(client: TestClient, settings: Settings) -> None:
    developer = make_developer(settings)
    other = make_developer(settings)
    one = {"Svc-Key": developer.key}
    assert client.get("/console/api/instances", headers=one).status_code == 200
    both = [("Svc-Key", developer.key), ("Authorization", f"Bearer {other.key}")]
    console = client.get("/console/api/instances", headers=both)
    assert console.status_code == 401 and console.json()["code"] == 401
    gateway = client.post("/svc/api/long/check", json={"appid": developer.appids[0]}, headers=both)
    assert gateway.status_code == 401 and gateway.json()["code"] == 401


def test_receiver_answers_come_from_the_error_table(client: TestClient, settings: Settings) -> None:
    developer = make_developer(settings)
    url = developer.receiver_url("")
    unknown = client.post(url + "x", content=b'{"event_type":"Msg","events":[]}')
    assert (unknown.status_code, unknown.json()) == (404, {"code": -404, "message": "no such receiver", "data": None})
    too_large = client.post(url, content=b" " * (settings.max_body_bytes + 1))
    assert too_large.status_code == 413
    assert too_large.json()["code"] == -413
    assert too_large.json()["message"] == f"the body is larger than {settings.max_body_bytes} bytes"
    bad = client.post(url, content=b'{"event_type":"Msg","events":[1]}')
    assert bad.status_code == 422 and bad.json()["code"] == -422
    accepted = client.post(url, content=b'{"event_type":"Msg","events":[{"id":"a"}]}')
    assert accepted.json() == {"code": 0, "message": "ok", "data": {"accepted": 1, "duplicates": 0}}


def test_a_refusal_is_the_gateways_json_with_its_rows_status_and_its_headers() -> None:
    from receiver.http import refusal_response
    from svcgw.errors import GatewayError

    response = refusal_response(GatewayError(gateway_codes.RATE_LIMITED, headers={"Retry-After": "7"}))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["content-type"] == "application/json"
    assert orjson.loads(response.body) == {"code": -42900, "message": gateway_codes.RATE_LIMITED.message, "data": None}
    told = refusal_response(GatewayError(gateway_codes.NOT_FOUND, "no such appid"))
    assert (told.status_code, told.body) == (404, b'{"code":-40404,"message":"no such appid","data":null}')


def test_a_plain_refusal_is_one_line_of_text_with_its_status_and_headers() -> None:
    from receiver.http import plain_answer
    from svcgw.errors import PlainRefusal

    answer = plain_answer(PlainRefusal(plain_codes.METRICS_TOKEN_REQUIRED, headers={"WWW-Authenticate": "Bearer"}))
    assert (answer.status_code, answer.body) == (401, b"a bearer token is required\n")
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.headers["www-authenticate"] == "Bearer"
    told = plain_answer(PlainRefusal(plain_codes.DASHBOARD_NOT_FOUND, "not found in the dashboard: no shard 3"))
    assert (told.status_code, told.body) == (404, b"not found in the dashboard: no shard 3\n")


def test_the_operators_endpoints_raise_and_the_app_answers_in_text(client: TestClient) -> None:
    missing = client.get("/docs/swagger-ui.js.map")
    assert (missing.status_code, missing.text) == (404, "not found\n")
    assert missing.headers["content-type"] == "text/plain; charset=utf-8"


def _wire(response: object) -> tuple[int, bytes, dict[str, str]]:
    """Status, body and headers of an answer, as a client gets them (the length checked against the body)."""
    headers = dict(response.headers)  # type: ignore[attr-defined]
    body: bytes = response.body  # type: ignore[attr-defined]
    assert headers.pop("content-length") == str(len(body))
    return (response.status_code, body, headers)  # type: ignore[attr-defined]


def test_one_serializer_makes_every_surfaces_json_answer_byte_for_byte() -> None:
    from receiver.console.answers import api_answer
    from receiver.console.codes import CSRF_FAILED, NOT_SIGNED_IN
    from receiver.console.web import ConsoleHTTPError, json_ok
    from receiver.endpoint.codes import RECEIVER_LIMITED
    from receiver.http import answer_body, refusal_response
    from svcgw.errors import GatewayError

    assert answer_body(-40404, "gone") == b'{"code":-40404,"message":"gone","data":null}'
    assert answer_body(0, "ok", {"n": 1}) == b'{"code":0,"message":"ok","data":{"n":1}}'
    json = "application/json"
    # The gateway API's refusal, and its success.
    assert _wire(refusal_response(GatewayError(gateway_codes.UNAUTHORIZED))) == (
        401,
        b'{"code":401,"message":"API key missing, invalid or revoked","data":null}',
        {"content-type": json},
    )
    assert _wire(json_answer(0, "ok", [1])) == (
        200,
        b'{"code":0,"message":"ok","data":[1]}',
        {"content-type": json},
    )
    # The receiver's refusal, with its Retry-After.
    limited = _wire(refusal_response(GatewayError(RECEIVER_LIMITED, headers={"Retry-After": "3"})))
    body = (
        b'{"code":-429,"message":"too many posts to receivers that do not exist from this address; '
        b'retry after the time in Retry-After","data":null}'
    )
    assert limited == (429, body, {"retry-after": "3", "content-type": json})
    # The console's JSON API: no-store on every answer, the scheme on its own 401s.
    assert _wire(api_answer(ConsoleHTTPError(NOT_SIGNED_IN))) == (
        401,
        b'{"code":401,"message":"sign in first: a console session or an API key is required","data":null}',
        {"cache-control": "no-store", "www-authenticate": "Bearer", "content-type": json},
    )
    assert _wire(api_answer(ConsoleHTTPError(CSRF_FAILED))) == (
        403,
        b'{"code":-40310,"message":"CSRF token missing or wrong","data":null}',
        {"cache-control": "no-store", "content-type": json},
    )
    assert _wire(json_ok({"a": None}, status=201)) == (
        201,
        b'{"code":0,"message":"ok","data":{"a":null}}',
        {"cache-control": "no-store", "content-type": json},
    )
