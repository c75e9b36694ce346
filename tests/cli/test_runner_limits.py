"""The HTTP server's own limits: concurrency beyond SVCGW_HTTP_LIMIT_CONCURRENCY, idle keep-alive."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from svcgw.config.settings import Settings, SettingsError
from tests.support import start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_requests_beyond_the_concurrency_limit_are_refused_at_once(env: dict[str, str]) -> None:
    # The drips' head deadline far off: on a loaded machine the test must not outlast it, or the
    # server closes them (rightly) and the next request gets in.
    process, base = start_server(dict(env, SVCGW_HTTP_LIMIT_CONCURRENCY="2", SVCGW_HTTP_HEADER_TIMEOUT="120"))
    drips: list[socket.socket] = []
    try:
        # Connections that send half a request and stop hold their places (from two addresses: with
        # a cap of 2, each address may hold one)...
        for address in ("127.0.0.2", "127.0.0.3"):
            drip = socket.create_connection(("127.0.0.1", _port(base)), timeout=5, source_address=(address, 0))
            drip.sendall(b"POST /svc/receiver/we_x/y HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            drips.append(drip)

        # ...once the server has taken both (the first 503 tells; until then a request may still get in)...
        def refused() -> bool:
            return httpx.get(base + "/healthz", timeout=5).status_code == 503

        wait_for(refused, timeout=10, what="the server to hold both connections (a first 503)")

        # ...every further request is answered 503 straight away, not queued behind them.
        for _ in range(3):
            started = time.monotonic()
            answer = httpx.get(base + "/healthz", timeout=10)
            elapsed = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            assert elapsed < 2.0, f"the 503 took {elapsed:.2f}s: queued, not refused at once"
    finally:
        for drip in drips:
            drip.close()
        process.stop()


def test_idle_keep_alive_connections_are_closed(env: dict[str, str]) -> None:
    process, base = start_server(dict(env, SVCGW_HTTP_KEEPALIVE_TIMEOUT="0.5"))
    try:
        with socket.create_connection(("127.0.0.1", _port(base)), timeout=10) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = conn.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            # The server closes the idle connection: recv returns b"" (EOF) well before the socket timeout.
            while conn.recv(65536):
                pass
            assert time.monotonic() - started < 8
    finally:
        process.stop()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SVCGW_HTTP_LIMIT_CONCURRENCY", "0"),
        ("SVCGW_HTTP_LIMIT_CONCURRENCY", "many"),
        ("SVCGW_HTTP_KEEPALIVE_TIMEOUT", "0"),
        ("SVCGW_HTTP_BODY_TIMEOUT", "0"),
        ("SVCGW_HTTP_BODY_TIMEOUT", "soon"),
        ("SVCGW_HTTP_BODY_MIN_RATE", "-1"),
        ("SVCGW_HTTP_BODY_MIN_RATE", "fast"),
        ("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS", "0"),
        ("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS", "an eighth"),
        ("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS", "2049"),  # more than the cap it is a share of
    ],
)
def test_bad_limits_stop_start_up(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_limits_have_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.http_limit_concurrency == 2048 and settings.http_keepalive_timeout == 5.0
    # mod_reqtimeout's body=20,MinRate=500; an eighth of the connections per client address.
    assert settings.http_body_timeout == 20.0 and settings.http_body_min_rate == 500
    assert settings.http_address_share == 256


def test_the_address_share_follows_the_cap_unless_set() -> None:
    assert Settings.from_env({"SVCGW_HTTP_LIMIT_CONCURRENCY": "100"}).http_address_share == 12
    assert Settings.from_env({"SVCGW_HTTP_LIMIT_CONCURRENCY": "4"}).http_address_share == 1
    chosen = Settings.from_env({"SVCGW_HTTP_LIMIT_CONCURRENCY": "100", "SVCGW_HTTP_CONNECTIONS_PER_ADDRESS": "100"})
    assert chosen.http_address_share == 100
    assert Settings.from_env({"SVCGW_HTTP_BODY_MIN_RATE": "0"}).http_body_min_rate == 0  # a fixed deadline
