"""The console's test POST: one signed POST through a Sender, every failure a readable result."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping

import orjson
import pytest

from svcgw.callbacks.outbound import CallbackSender, Refused, Response, SendError, SendFailed, TimedOut
from svcgw.callbacks.signing import USER_AGENT, verify
from svcgw.callbacks.testpost import RESPONSE_SNIPPET_BYTES, TEST_EVENT_TYPE, CallbackTestResult, send_test
from tests.support import Sink

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


class FakeSender:
    """A Sender that answers, or fails, as told, and remembers what it was given."""

    def __init__(self, answer: Response | SendError) -> None:
        self.answer = answer
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    @property
    def timeout(self) -> float:
        return 1.0

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        self.sent.append((url, body, dict(headers)))
        if isinstance(self.answer, SendError):
            raise self.answer
        return self.answer

    async def aclose(self) -> None:
        return None


def run_test(sender: FakeSender, token: str | None = None, appid: str | None = "we_x"):  # type: ignore[no-untyped-def]
    return asyncio.run(send_test(sender, "https://example.com/hook", secret="whsec_k", token=token, appid=appid))


def test_a_2xx_is_ok_and_the_post_is_signed() -> None:
    sender = FakeSender(Response(204, "fine"))
    result = run_test(sender, token="tok")
    assert result.ok and result.status == 204 and result.error is None and result.response == "fine"
    ((url, body, headers),) = sender.sent
    assert url == "https://example.com/hook"
    sent = orjson.loads(body)
    assert sent["appid"] == "we_x" and sent["event_type"] == TEST_EVENT_TYPE and sent["test"] is True
    assert sent["events"][0]["id"] == result.event_id
    assert headers["X-Svc-Event-Type"] == TEST_EVENT_TYPE and headers["User-Agent"] == USER_AGENT
    assert headers["Authorization"] == "Bearer tok"
    assert "X-Svc-Delivery-Id" not in headers and "X-Svc-Attempt" not in headers
    assert verify("whsec_k", headers["X-Svc-Timestamp"], body, headers["X-Svc-Signature"])


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (Refused("address 10.0.0.1 is internal"), "destination refused: address 10.0.0.1 is internal"),
        (TimedOut("timed out after 1.0s"), "timed out"),
        (SendFailed("ConnectError", "connection refused"), "ConnectError: connection refused"),
    ],
)
def test_a_failure_is_a_result_not_an_exception(failure: SendError, error: str) -> None:
    result = run_test(FakeSender(failure))
    assert not result.ok and result.status is None and result.error == error


def test_non_2xx_answers() -> None:
    assert run_test(FakeSender(Response(500, "oops"))).error == "HTTP 500"
    redirected = run_test(FakeSender(Response(302, "")))
    assert not redirected.ok and redirected.status == 302
    assert redirected.error == "HTTP 302 (redirects are not followed)"


def test_the_answer_shown_is_cut() -> None:
    result = run_test(FakeSender(Response(200, "é" * 2000)))
    assert len(result.response.encode()) <= RESPONSE_SNIPPET_BYTES + 2


def test_through_the_guarded_client_to_a_real_sink(sink: Sink) -> None:
    async def main() -> tuple[CallbackTestResult, CallbackTestResult]:
        allowed, guarded = CallbackSender(allow=LOOPBACK, timeout=5), CallbackSender(allow=(), timeout=5)
        try:
            ok = await send_test(allowed, sink.url, secret="whsec_k", token=None, appid=None)
            refused = await send_test(guarded, sink.url, secret="s", token=None, appid=None)
            return ok, refused
        finally:
            await allowed.aclose()
            await guarded.aclose()

    ok, refused = asyncio.run(main())
    assert ok.ok and ok.status == 200
    (received,) = sink.posts()
    assert "appid" not in orjson.loads(received.body) and "authorization" not in received.headers
    assert not refused.ok and refused.error is not None and refused.error.startswith("destination refused: ")
