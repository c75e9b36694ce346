"""Pure parts of the console: the test POST's body and headers, status fields, input checks."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from receiver.console.pages import _safe_next
from receiver.console.service import _operations
from svcgw.callbacks.signing import sign
from svcgw.callbacks.testpost import TEST_CONTENT, TEST_EVENT_TYPE, build_test_body, signed_headers
from svcgw.errors import Invalid


def test_test_body_for_an_instance_and_for_the_account_default() -> None:
    moment = datetime(2026, 11, 22, 3, 44, 45, 123456, tzinfo=UTC)
    body = build_test_body("we_abc", event_id="cbtest_1", now=moment)
    assert body == (
        b'{"appid":"we_abc","event_type":"SvcCallbackTest","test":true,"events":[{"id":"cbtest_1",'
        b'"content":' + orjson.dumps(TEST_CONTENT) + b',"created_at":"2026-11-22T03:44:45Z"}]}'
    )
    default = orjson.loads(build_test_body(None))
    assert "appid" not in default and default["event_type"] == TEST_EVENT_TYPE and default["test"] is True
    assert default["events"][0]["id"].startswith("cbtest_")
    assert build_test_body(None) != build_test_body(None)  # a unique id each time


def test_signed_headers() -> None:
    body = b'{"x":1}'
    headers = signed_headers("whsec_k", "tok", body, 1700000000)
    assert headers["X-Svc-Timestamp"] == "1700000000"
    assert headers["X-Svc-Signature"] == sign("whsec_k", 1700000000, body)
    assert headers["Authorization"] == "Bearer tok"
    assert "Authorization" not in signed_headers("whsec_k", None, body, 1)


def test_next_after_sign_in_stays_inside_the_console() -> None:
    assert _safe_next("/console/instances/we_1") == "/console/instances/we_1"
    for bad in (
        None,
        "",
        "https://evil.example/",
        "//evil.example",
        "/console",
        "/consolex/a",
        "/console/login",
        "/console/\\evil",
        "/console/a\nb",
    ):
        assert _safe_next(bad) is None, bad


def test_operation_names() -> None:
    assert _operations(["/svc/api/message/sendText", "instances/set-callback"]) == [
        "message/sendText",
        "instances/set-callback",
    ]
    for bad in (["x"], ["a/b/c"], ["a b/c"], ["m/" + "a" * 200], []):
        with pytest.raises(Invalid):
            _operations(bad)
