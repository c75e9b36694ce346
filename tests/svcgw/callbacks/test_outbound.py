"""The guarded callback client: connect-time address rules, Host and SNI kept, no redirects,
one overall deadline, errors converted."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from svcgw.callbacks.addresses import check_callback_url, own_targets
from svcgw.callbacks.outbound import CallbackSender, Refused, Response, SendError, SendFailed, TimedOut
from svcgw.config.settings import Settings
from tests.support import fake_resolver

T = TypeVar("T")

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@dataclass
class Server:
    port: int
    seen: list[dict[str, str]] = field(default_factory=list)
    sni: list[str | None] = field(default_factory=list)


def _serve(tls: ssl.SSLContext | None) -> Iterator[Server]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server = Server(port=httpd.server_address[1])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            server.seen.append({"method": self.command, "path": self.path, "host": self.headers["Host"]})
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_GET = _answer
        do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd.RequestHandlerClass = Handler
    if tls is not None:

        def remember(sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
            server.sni.append(name)

        tls.sni_callback = remember
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serve(None)


@dataclass
class Certificate:
    server_context: ssl.SSLContext
    client_context: ssl.SSLContext


@pytest.fixture
def certificate(tmp_path: Path) -> Certificate:
    """A self-signed certificate for rebind.example only (no IP address in it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rebind.example")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("rebind.example")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file = tmp_path / "cert.pem"
    key_file = tmp_path / "key.pem"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    client_context = ssl.create_default_context(cadata=cert_pem.decode())
    return Certificate(server_context, client_context)


@pytest.fixture
def tls_server(certificate: Certificate) -> Iterator[Server]:
    yield from _serve(certificate.server_context)


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make())


async def post(
    url: str,
    *,
    allow: Any = (),
    resolve: Any = None,
    verify: ssl.SSLContext | bool = True,
    timeout: float = 5,
    headers: dict[str, str] | None = None,
    ports: Any = None,
    own: Any = None,
) -> Response:
    extra: dict[str, Any] = {} if ports is None else {"ports": ports}
    if own is not None:
        extra["own"] = own
    sender = CallbackSender(allow=allow, timeout=timeout, resolve=resolve, verify=verify, **extra)
    try:
        return await sender.post(url, b"{}", headers or {"Content-Type": "application/json"})
    finally:
        await sender.aclose()


# --- refused -----------------------------------------------------------------------
def test_localhost_refused(server: Server) -> None:
    with pytest.raises(Refused) as info:
        run(lambda: post(f"http://localhost:{server.port}/"))
    assert info.value.code == -40013
    assert "localhost" in str(info.value) and "internal" in str(info.value)
    assert server.seen == []


def test_refused_is_a_send_error(server: Server) -> None:
    # Callers that handle send failures in general handle this one too.
    with pytest.raises(SendError):
        run(lambda: post(f"http://localhost:{server.port}/"))
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


def test_a_name_that_points_at_the_service_at_send_time_is_refused(server: Server) -> None:
    # Saved while the name resolved elsewhere; at send it resolves to the service itself, which the
    # allow-list would let through: the own-address rule (-40012) holds at connect as at save.
    own = own_targets(Settings.from_env({"SVCGW_PUBLIC_URL": f"http://gw.example:{server.port}"}))
    at_delivery = fake_resolver({"rebind.example": ["127.0.0.1"], "gw.example": ["127.0.0.1"]})
    with pytest.raises(Refused) as info:
        run(lambda: post(f"http://rebind.example:{server.port}/hook", allow=LOOPBACK, resolve=at_delivery, own=own))
    assert info.value.code == -40012 and "own address" in str(info.value)
    assert server.seen == []
    # The same name on the service's host but another port is somebody else's, and is sent to.
    elsewhere = own_targets(Settings.from_env({"SVCGW_PUBLIC_URL": f"http://gw.example:{server.port + 1}"}))
    answer = run(
        lambda: post(f"http://rebind.example:{server.port}/", allow=LOOPBACK, resolve=at_delivery, own=elsewhere)
    )
    assert answer.status == 200


@pytest.mark.parametrize("token", ["a\r\nX-Injected: 1", "a\x00b", "a\nb"])
def test_a_header_http_cannot_carry_is_a_failed_attempt_with_its_reason(server: Server, token: str) -> None:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    with pytest.raises(SendFailed) as info:
        run(lambda: post(f"http://127.0.0.1:{server.port}/", allow=LOOPBACK, headers=headers))
    assert info.value.kind == "InvalidHeader" and "Bearer token" in str(info.value)
    assert token not in str(info.value) and server.seen == []


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


@pytest.mark.parametrize("host", ["127.0.0.1", "rebind.example"])
def test_a_port_outside_the_allowed_ones_is_refused_at_connect_time(server: Server, host: str) -> None:
    # The server's port is not allowed: by IP literal (the socket factory) or by name (the resolver).
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    with pytest.raises(Refused) as info:
        run(lambda: post(f"http://{host}:{server.port}/", allow=LOOPBACK, resolve=resolve, ports=((1, 1000),)))
    assert "port" in str(info.value)
    assert server.seen == []
    allowed = ((server.port, server.port),)
    answer = run(lambda: post(f"http://{host}:{server.port}/", allow=LOOPBACK, resolve=resolve, ports=allowed))
    assert answer.status == 200


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


def test_tls_uses_original_name(tls_server: Server, certificate: Certificate) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    answer = run(
        lambda: post(
            f"https://rebind.example:{tls_server.port}/tls",
            allow=LOOPBACK,
            resolve=resolve,
            verify=certificate.client_context,
        )
    )
    assert answer.status == 200
    assert tls_server.sni == ["rebind.example"]
    assert tls_server.seen == [{"method": "POST", "path": "/tls", "host": f"rebind.example:{tls_server.port}"}]


# --- answers ------------------------------------------------------------------------
async def _one_shot(answer: bytes, *, hang: bool = False, then: bytes = b"") -> tuple[asyncio.Server, int]:
    """A server that answers one request with ``answer`` (and, a moment later, ``then``)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if hang:
                await asyncio.sleep(30)
            writer.write(answer)
            await writer.drain()
            if then:
                await asyncio.sleep(0.05)
                writer.write(then)
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


def test_an_answer_in_two_parts_is_read_whole() -> None:
    async def main() -> Response:
        server, port = await _one_shot(b"HTTP/1.1 503 Busy\r\nContent-Length: 10\r\n\r\nfirst", then=b"-last")
        async with server:
            return await post(f"http://127.0.0.1:{port}/", allow=LOOPBACK)

    answer = run(main)
    assert answer.status == 503 and answer.snippet == "first-last"


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


def test_one_deadline_for_the_whole_answer() -> None:
    """An endpoint that drips its answer is cut off at the timeout, not per read."""

    async def main() -> None:
        async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                for _ in range(100):
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.05)
            finally:
                writer.close()

        server = await asyncio.start_server(drip, "127.0.0.1", 0)
        async with server:
            await post(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", allow=LOOPBACK, timeout=0.5)

    started = time.monotonic()
    with pytest.raises(TimedOut):
        run(main)
    assert time.monotonic() - started < 3


def test_a_callback_asks_for_no_compressed_answer() -> None:
    """It decompresses nothing (``auto_decompress=False``): only the headers it was given, and HTTP/1.1's own."""
    heads: list[bytes] = []

    async def main() -> Response:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            return await post(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook", allow=LOOPBACK)

    assert run(main) == Response(200, "ok")
    names = sorted(line.split(b":")[0].lower() for line in heads[0].split(b"\r\n")[1:] if line)
    assert names == [b"content-length", b"content-type", b"host"]
