from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from svcgw.addresses import check_callback_url
from svcgw.transport import DestinationBlocked, GuardedTransport, make_async_client, make_client

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


def fake_resolver(table: Mapping[str, Sequence[str]]) -> Callable[[str, int], list[str]]:
    def resolve(host: str, port: int) -> list[str]:
        try:
            return list(table[host])
        except KeyError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None

    return resolve


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


# --- refused -----------------------------------------------------------------


def test_localhost_refused(server: Server) -> None:
    with make_client(allow=(), timeout=5) as client:
        with pytest.raises(DestinationBlocked) as info:
            client.get(f"http://localhost:{server.port}/")
    assert info.value.code == -40013
    assert "localhost" in str(info.value)
    assert info.value.request.url.host == "localhost"
    assert server.seen == []


def test_ip_literal_refused(server: Server) -> None:
    with make_client(allow=(), timeout=5) as client:
        with pytest.raises(DestinationBlocked):
            client.post(f"http://127.0.0.1:{server.port}/", content=b"{}")
        with pytest.raises(DestinationBlocked):
            client.post(f"http://[::ffff:127.0.0.1]:{server.port}/", content=b"{}")
    assert server.seen == []


def test_dns_rebinding_refused(server: Server) -> None:
    # Configured while the name pointed at a public address...
    configured = check_callback_url(
        f"http://rebind.example:{server.port}/hook",
        resolve=fake_resolver({"rebind.example": ["93.184.216.34"]}),
    )
    # ...and resolving to loopback by the time of delivery.
    at_delivery = fake_resolver({"rebind.example": ["127.0.0.1"]})
    with make_client(allow=(), timeout=5, resolve=at_delivery) as client:
        with pytest.raises(DestinationBlocked) as info:
            client.post(configured.url, content=b"{}")
    assert "internal" in str(info.value)
    assert server.seen == []


def test_blocked_is_a_connect_error(server: Server) -> None:
    # Callers that handle connection failures in general handle this one too.
    with make_client(allow=(), timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(f"http://localhost:{server.port}/")
        with pytest.raises(httpx.TransportError):
            client.get(f"http://localhost:{server.port}/")
    assert server.seen == []


def test_unresolvable_host_blocked() -> None:
    with make_client(allow=LOOPBACK, timeout=5, resolve=fake_resolver({})) as client:
        with pytest.raises(DestinationBlocked) as info:
            client.get("http://nowhere.invalid/")
    assert "does not resolve" in str(info.value)


# --- allowed -----------------------------------------------------------------


def test_allowed_keeps_host_header(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    with make_client(allow=LOOPBACK, timeout=5, resolve=resolve) as client:
        response = client.post(f"http://rebind.example:{server.port}/hook?x=1", content=b"{}")
    assert response.status_code == 200
    assert server.seen == [{"method": "POST", "path": "/hook?x=1", "host": f"rebind.example:{server.port}"}]


def test_internal_answers_dropped_public_kept(server: Server) -> None:
    # 10.0.0.1 is never dialled: only the allowed loopback answer is.
    resolve = fake_resolver({"rebind.example": ["10.0.0.1", "127.0.0.1"]})
    with make_client(allow=LOOPBACK, timeout=5, resolve=resolve) as client:
        assert client.get(f"http://rebind.example:{server.port}/").status_code == 200
    assert len(server.seen) == 1


def test_next_address_after_connect_failure(server: Server) -> None:
    # Nothing listens on 127.0.0.2, so the second answer is used.
    resolve = fake_resolver({"rebind.example": ["127.0.0.2", "127.0.0.1"]})
    with make_client(allow=LOOPBACK, timeout=5, resolve=resolve) as client:
        assert client.get(f"http://rebind.example:{server.port}/").status_code == 200
    assert len(server.seen) == 1


def test_all_addresses_failing_is_plain_connect_error(server: Server) -> None:
    resolve = fake_resolver({"rebind.example": ["127.0.0.2", "127.0.0.3"]})
    with make_client(allow=LOOPBACK, timeout=5, resolve=resolve) as client:
        with pytest.raises(httpx.ConnectError) as info:
            client.get(f"http://rebind.example:{server.port}/")
    assert not isinstance(info.value, DestinationBlocked)


def test_tls_uses_original_name(tls_server: Server, certificate: Certificate) -> None:
    # The certificate names only rebind.example: the handshake succeeds only if
    # SNI and hostname verification use the name, not the dialled IP.
    resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
    transport = GuardedTransport(allow=LOOPBACK, resolve=resolve, verify=certificate.client_context)
    with httpx.Client(transport=transport, timeout=5, follow_redirects=False) as client:
        response = client.get(f"https://rebind.example:{tls_server.port}/tls")
    assert response.status_code == 200
    assert tls_server.sni == ["rebind.example"]
    assert tls_server.seen == [{"method": "GET", "path": "/tls", "host": f"rebind.example:{tls_server.port}"}]


def test_redirects_not_followed(server: Server) -> None:
    with make_client(allow=LOOPBACK, timeout=5) as client:
        assert client.follow_redirects is False


# --- async -------------------------------------------------------------------


def test_async_client(server: Server) -> None:
    async def main() -> None:
        resolve = fake_resolver({"rebind.example": ["127.0.0.1"]})
        async with make_async_client(allow=(), timeout=5, resolve=resolve) as client:
            with pytest.raises(DestinationBlocked):
                await client.post(f"http://rebind.example:{server.port}/", content=b"{}")
        assert server.seen == []
        async with make_async_client(allow=LOOPBACK, timeout=5, resolve=resolve) as client:
            response = await client.post(f"http://rebind.example:{server.port}/test", content=b"{}")
        assert response.status_code == 200

    asyncio.run(main())
    assert server.seen == [{"method": "POST", "path": "/test", "host": f"rebind.example:{server.port}"}]
