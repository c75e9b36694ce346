"""No caller's address reaches the capability layer, by any path: only the instance's receiver URL does.

The gateway runs in-process behind a real HTTP server, against a real Redis,
with a recording capability layer (a real HTTP server on loopback) as its
upstream. Every operation the gateway or the simulator knows, unlisted ones,
and paths that look like the callback routes are called with caller
addresses in ``callbackUrl``; what the upstream received is then read.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from starlette.types import Receive, Scope, Send

from receiver.gateway.body import CALLBACK_OPERATIONS, DEVICE_CREATE, SET_CALLBACK_OPERATION, UPLOAD_OPERATIONS
from receiver.gateway.forwarding import LONG_STOP, PROXY_OPERATIONS
from simulator.capabilities import HANDLERS
from tests.support import ThreadedServer

from .stack import JSON_HEADERS, Stack, start_stack

# What a caller may try to point the capability layer at: internal, not http(s), loopback (which the
# tests' SVCGW_ALLOW_PRIVATE_DESTINATIONS lets pass the address rules, so it is stored and forwarded
# in its rewritten form on the callback operations).
CALLER_ADDRESSES = ("http://10.0.0.5/internal", "ftp://x/y", "http://127.0.0.1:9/loopback")
ADDRESS_MARKS = (b"10.0.0.5", b"ftp:", b"loopback", b"127.0.0.1:9")

# The spec's operations the simulator does not play, and some that nobody lists.
OTHER_OPERATIONS = (
    "cdn/download",
    "friend/deleteSnsComment",
    "friend/commentSns",
    "message/recall",
    "contact/list",
    "no/suchOperation",
    "instances/setCallback",
    "instances/set_callback",
    "instance/set-callback",
    "api/set-callback",
    "svc/set-callback",
)

# Paths that look like a callback route without being one: other prefixes, letter case, trailing
# slashes, encoded slashes and dots, doubled slashes, a query string.
LOOK_ALIKES = (
    "/svc/instances/set-callback",  # the real route, walked with them
    "/svc/api/instances/set-callback",
    "/svc/api/Instances/Set-Callback",
    "/svc/api/INSTANCES/SET-CALLBACK",
    "/svc/api/instances/set-callback?x=1",
    "/svc/api/long/START",
    "/svc/api/Long/start",
    "/svc/api/long/updatecallbackurl",
    "/svc/api/LONG/UPDATECALLBACKURL",
    "/svc/api/long/start/",
    "/svc/api/long/updateCallbackURL/",
    "/svc/api/instances/set-callback/",
    "/svc/api/instances%2fset-callback",
    "/svc/api/instances%2Fset-callback",
    "/svc/api/long%2fstart",
    "/svc/api/%6cong/start",
    "/svc/api/./long/start",
    "/svc/api//long/start",
    "//svc/api/long/start",
    "/svc/api/api/long/start",
    "/svc/api/svc/instances/set-callback",
    "/svc/instances/set-callback/",
    "/svc/instances/Set-Callback",
    "/svc/Instances/set-callback",
    "/SVC/instances/set-callback",
    "/svc/instances%2fset-callback",
    "/svc/instances/set-callback%2f",
    "/svc//instances/set-callback",
    "/svc/v1/instances/set-callback",
    "/svc/v1/api/long/start",
    "/api/instances/set-callback",
    "/api/long/start",
    "/instances/set-callback",
    "/svc/receiver/instances/set-callback",
    "/svc/console/instances/set-callback",
)


@dataclass
class RecordingUpstream:
    """A capability layer that answers every POST with code 0 and keeps what it was sent."""

    received: list[tuple[str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        with self.lock:
            self.received.append((scope["path"], body))
        answer = b'{"code":0,"message":"ok","time":"2026-01-01 00:00:00","data":null}'
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def bodies(self) -> list[tuple[str, bytes]]:
        with self.lock:
            return list(self.received)


@pytest.fixture
def upstream() -> Iterator[tuple[RecordingUpstream, str]]:
    recorder = RecordingUpstream()
    server = ThreadedServer(recorder).start()
    yield recorder, server.base
    server.stop()


def _post(base: str, target: str, key: str, body: bytes) -> tuple[int, int | None]:
    """HTTP status and envelope code of a POST with the request target exactly as written."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=15)
    try:
        connection.request("POST", target, body=body, headers={"Svc-Key": key, **JSON_HEADERS})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    try:
        code = json.loads(raw).get("code")
    except (ValueError, AttributeError):
        code = None  # the router's own answer (404, 405): not the gateway's envelope
    return response.status, code


def _operation_table() -> list[str]:
    known = {DEVICE_CREATE, LONG_STOP, "login/logout", SET_CALLBACK_OPERATION}
    known |= set(CALLBACK_OPERATIONS) | set(PROXY_OPERATIONS) | set(UPLOAD_OPERATIONS) | set(HANDLERS)
    return sorted(known | set(OTHER_OPERATIONS))


def test_no_path_forwards_a_callers_address(env: dict[str, str], upstream: tuple[RecordingUpstream, str]) -> None:
    recorder, base = upstream
    stack: Stack = start_stack(env, base, SVCGW_RATE_LIMIT="100000/minute")
    try:
        account, key = stack.account()
        appid = "walk-" + account
        stack.own(account, appid)
        receiver = stack.receiver_url(appid)
        paths = [f"/svc/api/{operation}" for operation in _operation_table()] + list(LOOK_ALIKES)
        answers: dict[tuple[str, str], tuple[int, int | None]] = {}
        for path in paths:
            for address in CALLER_ADDRESSES:
                for extra in ({"callbackUrl": address, "pushHistory": True}, {"callbackUrl": address}):
                    body = json.dumps({"appid": appid, **extra}).encode()
                    answers[path, address] = _post(stack.base, path, key, body)

        received = recorder.bodies()
        for path, body in received:
            for mark in ADDRESS_MARKS:
                assert mark not in body, (path, body)
            sent = json.loads(body)
            assert sent.get("callbackUrl", receiver) == receiver, (path, body)
        # Nothing but the two callback operations got a callbackUrl at all, and those got the receiver's.
        with_address = {path for path, body in received if b"callbackUrl" in body}
        assert with_address == {"/svc/api/long/start", "/svc/api/long/updateCallbackURL"}

        # The look-alike of the report: refused on its field, not forwarded as it came.
        assert answers["/svc/api/instances/set-callback", CALLER_ADDRESSES[0]] == (403, -40403)
        # Every other operation refuses the fields; the callback ones refuse what breaks the address rules.
        for operation in _operation_table():
            path = f"/svc/api/{operation}"
            if operation in CALLBACK_OPERATIONS:
                assert answers[path, "http://10.0.0.5/internal"] == (400, -40013)
                assert answers[path, "ftp://x/y"] == (400, -40011)
                assert answers[path, "http://127.0.0.1:9/loopback"] == (200, 0)
            else:
                for address in CALLER_ADDRESSES:
                    assert answers[path, address] == (403, -40403), path
        # The real route refuses the internal address and stores the allowed one, forwarding nothing.
        assert answers["/svc/instances/set-callback", "http://10.0.0.5/internal"] == (400, -40013)
        assert answers["/svc/instances/set-callback", "http://127.0.0.1:9/loopback"] == (200, 0)
        assert not any(path == "/svc/instances/set-callback" for path, _ in received)
    finally:
        stack.stop()


def test_the_look_alike_without_callback_fields_is_an_ordinary_api_operation(
    env: dict[str, str], upstream: tuple[RecordingUpstream, str]
) -> None:
    recorder, base = upstream
    stack = start_stack(env, base)
    try:
        account, key = stack.account()
        appid = "plain-" + account
        stack.own(account, appid)
        answer = stack.post("/svc/api/instances/set-callback", {"appid": appid}, key)
        assert answer.status_code == 200 and answer.json()["code"] == 0, answer.text
        assert recorder.bodies() == [("/svc/api/instances/set-callback", json.dumps({"appid": appid}).encode())]
        # Its missing appid is the API's -40001, not the callback configuration's -40010.
        missing = stack.post("/svc/api/instances/set-callback", {}, key)
        assert (missing.status_code, missing.json()["code"]) == (400, -40001)
        assert stack.forward_address(appid) is None
    finally:
        stack.stop()
