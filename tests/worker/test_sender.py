"""The aiohttp sender: connect-time address rules, Host and SNI kept, no redirects, errors converted."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from svcgw.addresses import check_callback_url
from svcgw.outbound import CallbackSender, Refused, Response, SendFailed, TimedOut
from tests.worker.test_transport import Certificate, Server, _serve, certificate, fake_resolver  # noqa: F401

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
T = TypeVar("T")


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make())


async def post(url: str, *, allow: Any = (), resolve: Any = None, verify: ssl.SSLContext | bool = True,
               timeout: float = 5, headers: dict[str, str] | None = None) -> Response:
    sender = CallbackSender(allow=allow, timeout=timeout, resolve=resolve, verify=verify)
    try:
        return await sender.post(url, b"{}", headers or {"Content-Type": "application/json"})
    finally:
        await sender.aclose()


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve(None)


@pytest.fixture
def tls_server(certificate: Certificate) -> Iterator[Server]:  # noqa: F811
    yield from _serve(certificate.server_context)


# --- refused -----------------------------------------------------------------------
def test_localhost_refused(server: Server) -> None:
    with pytest.raises(Refused) as info:
        run(lambda: post(f"http://localhost:{server.port}/"))
    assert info.value.code == -40013
    assert "localhost" in str(info.value) and "internal" in str(info.value)
    assert server.seen == []


@pytest.mark.parametrize("host", ["127.0.0.1", "[::ffff:127.0.0.1]", "[::1]", "0.0.0.0"])
def test_ip_literal_refused(server: Server, host: str) -> None:
    with pytest.raises(Refused):
        run(lambda: post(f"http://{host}:{server.port}/"))
    assert server.seen == []


def test_dns_rebinding_refused(server: Server) -> None:
    configured = check_callback_url(
        f"http://rebind.example:{server.port}/hook",
        resolve=fake_resolver({"rebind.example": ["93.184.216.34"]}),
    )
    at_delivery = fake_resolver({"rebind.example": ["127.0.0.1"]})
    with pytest.raises(Refused) as info:
        run(lambda: post(configured.url, resolve=at_delivery))
    assert "internal" in str(info.value)
    assert server.seen == []


def test_unresolvable_host_refused() -> None:
    with pytest.raises(Refused) as info:
        run(lambda: post("http://nowhere.invalid/", allow=LOOPBACK, resolve=fake_resolver({})))
    assert "does not resolve" in str(info.value)


# --- allowed -----------------------------------------------------------------------
def test_allowed_keeps_host_header(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    answer = run(lambda: post(f"http://rebind.example:{server.port}/hook?x=1", allow=LOOPBACK, resolve=resolve))
    assert answer == Response(200, "ok")
    assert server.seen == [{"method": "POST", "path": "/hook?x=1", "host": f"rebind.example:{server.port}"}]


def test_ip_literal_allowed_by_the_allow_list(server: Server) -> None:
    assert run(lambda: post(f"http://127.0.0.1:{server.port}/", allow=LOOPBACK)).status == 200


def test_internal_answers_dropped_allowed_kept(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["10.0.0.1", "127.0.0.1"]})
    assert run(lambda: post(f"http://rebind.example:{server.port}/", allow=LOOPBACK, resolve=resolve)).status == 200
    assert len(server.seen) == 1


def test_next_address_after_connect_failure(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.2", "127.0.0.1"]})
    assert run(lambda: post(f"http://rebind.example:{server.port}/", allow=LOOPBACK, resolve=resolve)).status == 200
    assert len(server.seen) == 1


def test_all_addresses_failing_is_a_connect_error(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.2", "127.0.0.3"]})
    with pytest.raises(SendFailed) as info:
        run(lambda: post(f"http://rebind.example:{server.port}/", allow=LOOPBACK, resolve=resolve))
    assert info.value.kind == "ConnectError"


def test_tls_uses_original_name(tls_server: Server, certificate: Certificate) -> None:  # noqa: F811
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    answer = run(lambda: post(f"https://rebind.example:{tls_server.port}/tls", allow=LOOPBACK, resolve=resolve,
                              verify=certificate.client_context))
    assert answer.status == 200
    assert tls_server.sni == ["rebind.example"]
    assert tls_server.seen == [{"method": "POST", "path": "/tls", "host": f"rebind.example:{tls_server.port}"}]


# --- answers ------------------------------------------------------------------------
async def _one_shot(answer: bytes, *, hang: bool = False) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if hang:
                await asyncio.sleep(30)
            writer.write(answer)
            await writer.drain()
        finally:
            # asyncio.run cancels a hanging handler at the end; close its socket then.
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_redirect_is_returned_not_followed() -> None:
    async def main() -> Response:
        server, port = await _one_shot(
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\n\r\n"
        )
        async with server:
            return await post(f"http://127.0.0.1:{port}/", allow=LOOPBACK)

    assert run(main).status == 302


def test_long_answer_is_cut_to_a_snippet() -> None:
    body = b"x" * 10000

    async def main() -> Response:
        server, port = await _one_shot(b"HTTP/1.1 500 Oops\r\nContent-Length: 10000\r\n\r\n" + body)
        async with server:
            return await post(f"http://127.0.0.1:{port}/", allow=LOOPBACK)

    answer = run(main)
    assert answer.status == 500 and answer.snippet == "x" * 2048


def test_timeout() -> None:
    async def main() -> None:
        server, port = await _one_shot(b"", hang=True)
        async with server:
            await post(f"http://127.0.0.1:{port}/", allow=LOOPBACK, timeout=0.3)

    with pytest.raises(TimedOut) as info:
        run(main)
    assert str(info.value) == "timed out after 0.3s"


def test_connection_refused() -> None:
    from tests.support import free_port

    with pytest.raises(SendFailed) as info:
        run(lambda: post(f"http://127.0.0.1:{free_port()}/", allow=LOOPBACK))
    assert str(info.value).startswith("ConnectError: ")


def test_closed_without_answer() -> None:
    async def main() -> None:
        server, port = await _one_shot(b"")
        async with server:
            await post(f"http://127.0.0.1:{port}/", allow=LOOPBACK)

    with pytest.raises(SendFailed) as info:
        run(main)
    assert info.value.kind == "RemoteProtocolError"
