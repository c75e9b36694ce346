"""The composition root over real HTTP: a client that leaves while its body is read is an info line."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest

from svcgw.config.settings import Settings
from tests.conftest import provision
from tests.support import start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


def half_a_post(path: str, content_type: str, first: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: 1000\r\n\r\n"
    return head.encode() + first


def test_a_client_leaving_mid_body_is_an_info_line_without_a_traceback(env: dict[str, str]) -> None:
    tenant = provision(Settings.from_env(env))
    # A second's deadline for bodies: the last post below is given up on by the server (408).
    process, base = start_server(dict(env, SVCGW_HTTP_BODY_TIMEOUT="1", SVCGW_HTTP_BODY_MIN_RATE="0"))
    try:
        port = int(base.rsplit(":", 1)[1])
        receiver = urlsplit(tenant.receiver_url(base)).path
        posts = [
            half_a_post("/console/api/session", "application/json", b'{"login": "a'),  # the console's JSON API
            half_a_post("/console/login", "application/x-www-form-urlencoded", b"login=a"),  # a console form
            half_a_post(receiver, "application/json", b'{"event_type": "Msg", '),  # the receiver, a valid token
        ]
        for post in posts:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(post)
                time.sleep(0.2)  # read by the server as far as it goes, then the client leaves
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(posts[0])
            assert conn.recv(65536).startswith(b"HTTP/1.1 408 ")

        def ended() -> int:  # the requests the server has finished with, well or badly
            log = process.output()
            return log.count("ended before its body arrived") + log.count("Exception in ASGI application")

        wait_for(lambda: ended() >= 4, timeout=10, what="the server to end all four requests")
        log = process.output()
        assert "Traceback" not in log and "ClientDisconnect" not in log and '"level":"error"' not in log, log
        assert log.count("ended before its body arrived") == 4
        assert tenant.receiver_url(base).rsplit("/", 1)[1] not in log  # the receiver's token is not in the line
    finally:
        process.stop()
