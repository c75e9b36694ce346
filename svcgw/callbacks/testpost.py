"""The ``SvcCallbackTest`` POST sent when a callback address is saved in the console.

Building is kept apart from sending. ``build_test_body`` is pure: the spec's
body (Events, Delivery item 5) with ``appid`` only for an instance address,
``event_type`` ``SvcCallbackTest``, ``test`` true and one event
``{id: "cbtest_" + unique, content, created_at}``. ``signed_headers`` adds the
same HMAC headers as a delivery (:func:`svcgw.callbacks.signing.signed_headers`, without
delivery id and attempt; the Bearer header when a token is set).

``send_test`` makes exactly one POST through the guarded callback client
(a :class:`svcgw.callbacks.outbound.Sender`, so the same connect-time address rules as
a delivery, no redirects, and one overall deadline, the sender's timeout):
it is not queued, not retried, and not written to the callback log. Its
error policy:
it never raises; a refused destination, a timeout, a connection error and
any non-2xx answer all come back as a ``CallbackTestResult`` with ``ok`` false and a
readable ``error``. A displayed success means only that the target answered
2xx. Nothing in a result, an error or a log line carries the token.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import orjson

from svcgw.callbacks import signing
from svcgw.callbacks.outbound import Refused, Sender, SendError, TimedOut

__all__ = [
    "TEST_CONTENT",
    "TEST_EVENT_TYPE",
    "CallbackTestResult",
    "build_test_body",
    "new_test_event_id",
    "send_test",
    "signed_headers",
]

TEST_EVENT_TYPE = "SvcCallbackTest"
TEST_CONTENT = "This is a test callback from svcgw. Your callback address is reachable."
RESPONSE_SNIPPET_BYTES = 512


def new_test_event_id() -> str:
    return "cbtest_" + secrets.token_hex(12)


def utc_iso8601(moment: datetime) -> str:
    """``2026-11-22T03:44:45Z``: UTC, to the second."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def build_test_body(appid: str | None, *, event_id: str | None = None, now: datetime | None = None) -> bytes:
    """The raw body of one test POST; ``appid`` is None for the account default address."""
    body: dict[str, object] = {}
    if appid is not None:
        body["appid"] = appid
    body["event_type"] = TEST_EVENT_TYPE
    body["test"] = True
    body["events"] = [
        {
            "id": event_id or new_test_event_id(),
            "content": TEST_CONTENT,
            "created_at": utc_iso8601(now or datetime.now(UTC)),
        }
    ]
    return orjson.dumps(body)


def signed_headers(secret: str, token: str | None, body: bytes, timestamp: int) -> dict[str, str]:
    return signing.signed_headers(secret, body, timestamp, event_type=TEST_EVENT_TYPE, token=token)


@dataclass(frozen=True)
class CallbackTestResult:
    ok: bool
    event_id: str
    status: int | None = None
    error: str | None = None
    duration_ms: float = 0.0
    response: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def send_test(
    sender: Sender,
    url: str,
    *,
    secret: str,
    token: str | None,
    appid: str | None,
) -> CallbackTestResult:
    """POST one ``SvcCallbackTest`` to ``url``; never raises (see the module docstring)."""
    event_id = new_test_event_id()
    body = build_test_body(appid, event_id=event_id)
    started = time.perf_counter()
    headers = signed_headers(secret, token, body, int(time.time()))

    def result(ok: bool, status: int | None = None, error: str | None = None, response: str = "") -> CallbackTestResult:
        elapsed = round((time.perf_counter() - started) * 1000, 1)
        return CallbackTestResult(ok, event_id, status, error, elapsed, response)

    try:
        answer = await sender.post(url, body, headers)
    except Refused as exc:
        return result(False, error=f"destination refused: {exc}")
    except TimedOut:
        return result(False, error="timed out")
    except SendError as exc:
        return result(False, error=str(exc))
    status = answer.status
    snippet = _cut(answer.snippet)
    if 200 <= status < 300:
        return result(True, status, response=snippet)
    reason = f"HTTP {status}"
    if 300 <= status < 400:
        reason += " (redirects are not followed)"
    return result(False, status, reason, snippet)


def _cut(snippet: str) -> str:
    """At most :data:`RESPONSE_SNIPPET_BYTES` of UTF-8, as the console shows it."""
    return snippet.encode("utf-8")[:RESPONSE_SNIPPET_BYTES].decode("utf-8", "replace")
