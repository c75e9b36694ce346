"""Gateway body limits: per operation, per account in flight, parsed off the event loop."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from unittest import mock

import pytest

from receiver.gateway import body as gateway_body
from receiver.gateway.inflight import InflightBytes
from svcgw.config.settings import Settings, SettingsError
from svcgw.errors import GatewayError
from svcgw.intake.ingest import PARSE_IN_THREAD_BYTES
from tests.support import wait_for

from .stack import Stack, error, start_stack
from .stack import sim as sim
from .stack import stack as stack

ORDINARY, UPLOAD, INFLIGHT = 2048, 8192, 12288
LIMITS = {
    "SVCGW_GATEWAY_MAX_BODY_BYTES": str(ORDINARY),
    "SVCGW_UPLOAD_MAX_BODY_BYTES": str(UPLOAD),
    "SVCGW_ACCOUNT_INFLIGHT_BYTES": str(INFLIGHT),
}


@pytest.fixture
def small(env: dict[str, str], sim: str) -> Iterator[Stack]:
    """A gateway with small limits, so the tests move kilobytes, not megabytes."""
    running = start_stack(env, sim, **LIMITS)
    yield running
    running.stop()


def padded(appid: str, size: int) -> bytes:
    """A JSON body of exactly ``size`` bytes for ``appid``."""
    head = b'{"appid":"' + appid.encode() + b'","pad":"'
    return head + b"x" * (size - len(head) - 2) + b'"}'


class HalfSent:
    """A gateway call whose headers and first body bytes are sent, and the rest held back."""

    def __init__(self, base: str, key: str, operation: str, body: bytes, sent: int, *, chunked: bool = False):
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.body, self.sent, self.chunked = body, sent, chunked
        length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
        head = (
            f"POST /svc/api/{operation} HTTP/1.1\r\nHost: {host}\r\nSvc-Key: {key}\r\n"
            f"Content-Type: application/json\r\n{length}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + self._frame(body[:sent]))

    def _frame(self, data: bytes) -> bytes:
        if not self.chunked or not data:
            return data
        return b"%x\r\n" % len(data) + data + b"\r\n"

    def finish(self) -> tuple[int, dict[str, object]]:
        self.sock.sendall(self._frame(self.body[self.sent :]) + (b"0\r\n\r\n" if self.chunked else b""))
        reader = self.sock.makefile("rb")
        status = int(reader.readline().split()[1])
        length = 0
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answer = json.loads(reader.read(length))
        self.sock.close()
        return status, answer

    def abandon(self) -> None:
        self.sock.close()


def _ledger(stack: Stack) -> InflightBytes:
    """The in-flight ledger of the in-process gateway under test."""
    app = stack.process.server.config.app
    return app.gateway.inflight  # type: ignore[no-any-return]


# --- per operation ---------------------------------------------------------------------


def test_ordinary_operations_take_the_small_limit_uploads_the_large_one(small: Stack) -> None:
    account, key = small.account()
    appid = "we_" + "1" * 15
    small.sim_seed(appid)
    small.own(account, appid)

    assert small.api(key, "message/sendText", padded(appid, ORDINARY)).status_code == 200
    answer = small.api(key, "message/sendText", padded(appid, ORDINARY + 1))
    assert error(answer) == (413, -41300)
    assert answer.json()["message"] == f"the request body is larger than {ORDINARY} bytes"
    assert error(small.post("/svc/instances/set-callback", padded(appid, ORDINARY + 1), key)) == (413, -41300)
    # Only these exact paths are uploads.
    assert error(small.api(key, "cdn/UploadImage", padded(appid, ORDINARY + 1))) == (413, -41300)

    for operation in ("cdn/uploadImage", "cdn/uploadFile", "cdn/uploadVideo"):
        through = small.api(key, operation, padded(appid, UPLOAD))
        assert through.status_code == 200 and through.json()["code"] == 0, through.text
        answer = small.api(key, operation, padded(appid, UPLOAD + 1))
        assert error(answer) == (413, -41300)
        assert answer.json()["message"] == f"the request body is larger than {UPLOAD} bytes"


def test_default_limits_are_1_mib_and_32_mib_for_uploads(stack: Stack) -> None:
    _, key = stack.account()
    assert stack.settings.gateway_max_body_bytes == 1024 * 1024
    assert stack.settings.upload_max_body_bytes == 32 * 1024 * 1024
    assert stack.settings.account_inflight_bytes == 64 * 1024 * 1024
    assert error(stack.api(key, "message/sendText", padded("we_x", 1024 * 1024 + 1))) == (413, -41300)
    # An upload of the same size gets past the size check (to the ownership check).
    assert error(stack.api(key, "cdn/uploadImage", padded("we_x", 1024 * 1024 + 1))) == (404, -40404)


# --- per account, in flight ------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_accounts_bodies_in_flight_are_capped_and_given_back(small: Stack, chunked: bool) -> None:
    account, key = small.account()
    other_account, other_key = small.account()
    appid, other_appid = "we_" + "2" * 15, "we_" + "3" * 15
    for owner, instance in ((account, appid), (other_account, other_appid)):
        small.sim_seed(instance)
        small.own(owner, instance)

    # A first upload is being read: with Content-Length its whole size is held at once; chunked,
    # what arrived so far.
    first = HalfSent(small.base, key, "cdn/uploadFile", padded(appid, UPLOAD), 6000, chunked=chunked)
    held = UPLOAD if not chunked else 6000
    second = padded(appid, INFLIGHT - held + 1)
    # Wait until the server has read what was sent, then a second body over the rest is refused at once.
    # Once the server holds what was sent, a second body over the rest is refused at once.
    ledger = _ledger(small)
    wait_for(lambda: ledger.held(account) == held, what="the first upload's bytes held")
    answer = small.api(key, "cdn/uploadImage", second)
    assert error(answer) == (429, -42900)
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["message"] == (
        f"the account's calls in progress already hold {held} body bytes, and at most {INFLIGHT} "
        "may be held at once; retry after the time in Retry-After"
    )
    # Within the rest, and for another account, calls go through meanwhile.
    assert small.api(key, "message/sendText", padded(appid, min(ORDINARY, INFLIGHT - held))).status_code == 200
    assert small.api(other_key, "cdn/uploadImage", padded(other_appid, UPLOAD)).status_code == 200

    status, body = first.finish()
    assert status == 200 and body["code"] == 0
    # Its share was given back when it ended.
    assert small.api(key, "cdn/uploadImage", padded(appid, UPLOAD)).status_code == 200


def test_a_call_refused_or_abandoned_gives_its_share_back(small: Stack) -> None:
    account, key = small.account()
    appid = "we_" + "4" * 15
    small.sim_seed(appid)
    small.own(account, appid)

    # Refused after its body was read (an appid of nobody's): the share goes back too.
    for _ in range(3):
        assert error(small.api(key, "cdn/uploadImage", padded("we_nobody", UPLOAD))) == (404, -40404)
    assert _ledger(small).held(account) == 0
    # A client that leaves mid-body.
    HalfSent(small.base, key, "cdn/uploadVideo", padded(appid, UPLOAD), 100).abandon()
    wait_for(lambda: _ledger(small).held(account) == 0, what="the abandoned call's share given back")
    assert small.api(key, "cdn/uploadImage", padded(appid, UPLOAD)).status_code == 200


def test_the_ledger_counts_per_account_and_releases_whatever_happens() -> None:
    ledger = InflightBytes(100)
    with ledger.share("a") as one:
        one.hold(60)
        one.hold(40)  # less than held: nothing more
        assert ledger.held("a") == 60
        with pytest.raises(GatewayError) as caught, ledger.share("a") as two:
            two.hold(30)
            two.hold(41)
        assert caught.value.code == -42900 and caught.value.headers == {"Retry-After": "1"}
        assert ledger.held("a") == 60
        with ledger.share("b") as other:
            other.hold(100)
        with pytest.raises(RuntimeError), ledger.share("a") as three:
            three.hold(40)
            raise RuntimeError("the call failed")
        assert ledger.held("a") == 60
    assert ledger.held("a") == ledger.held("b") == 0


def test_the_limits_are_settings(env: dict[str, str]) -> None:
    settings = Settings.from_env(dict(env, **LIMITS))
    assert (settings.gateway_max_body_bytes, settings.upload_max_body_bytes, settings.account_inflight_bytes) == (
        ORDINARY,
        UPLOAD,
        INFLIGHT,
    )
    for name in LIMITS:
        for bad in ("x", "1023", "-1"):
            with pytest.raises(SettingsError, match=name):
                Settings.from_env(dict(env, **{name: bad}))
    with pytest.raises(SettingsError, match=r"SVCGW_UPLOAD_MAX_BODY_BYTES .* at least SVCGW_GATEWAY_MAX_BODY_BYTES"):
        Settings.from_env(dict(env, SVCGW_GATEWAY_MAX_BODY_BYTES="4096", SVCGW_UPLOAD_MAX_BODY_BYTES="2048"))
    with pytest.raises(SettingsError, match=r"SVCGW_ACCOUNT_INFLIGHT_BYTES .* at least SVCGW_UPLOAD_MAX_BODY_BYTES"):
        Settings.from_env(dict(env, SVCGW_ACCOUNT_INFLIGHT_BYTES=str(16 * 1024 * 1024)))


# --- off the event loop ------------------------------------------------------------------


def test_a_large_body_is_parsed_off_the_event_loop(env: dict[str, str], sim: str) -> None:
    running = start_stack(env, sim, SVCGW_GATEWAY_MAX_BODY_BYTES=str(2 * PARSE_IN_THREAD_BYTES))
    threads: list[str] = []
    real = gateway_body.parse_body

    def recording(raw: bytes) -> object:
        threads.append(threading.current_thread().name)
        return real(raw)

    try:
        account, key = running.account()
        appid = "we_" + "5" * 15
        running.sim_seed(appid)
        running.own(account, appid)
        with mock.patch("receiver.gateway.intake.parse_body", side_effect=recording):
            assert running.api(key, "long/check", padded(appid, PARSE_IN_THREAD_BYTES)).status_code == 200
            assert running.api(key, "long/check", padded(appid, PARSE_IN_THREAD_BYTES + 1)).status_code == 200
    finally:
        running.stop()
    server_thread = running.process.thread.name
    assert threads[0] == server_thread and threads[1] != server_thread
