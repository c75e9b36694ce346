"""The capability-layer client: answers and the errors it converts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from svcgw.upstream import Answer, Upstream, UpstreamUnreachable, UpstreamUnusable, parse_envelope
from tests.support import Sink


def _answer(raw: bytes) -> Answer:
    return Answer(raw, parse_envelope(raw))


def test_upstream_errors_are_converted(sink: Sink) -> None:
    base = sink.url.removesuffix("/hook")

    async def call(timeout: float = 5.0) -> Answer:
        upstream = Upstream(base, timeout=timeout)
        try:
            return await upstream.call("long", "check", b'{"appid":"x"}')
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnusable, match="no integer code"):
        asyncio.run(call())  # the sink answers {"ok": true}
    sink.set(status=500)
    with pytest.raises(UpstreamUnusable, match="HTTP 500"):
        asyncio.run(call())
    sink.set(status=200, delay=1.0)
    started = time.monotonic()
    with pytest.raises(UpstreamUnreachable, match="timed out"):
        asyncio.run(call(timeout=0.2))
    assert time.monotonic() - started < 1.0
    assert sink.posts()[0].path == "/svc/api/long/check"


def test_upstream_unreachable() -> None:
    async def call() -> Answer:
        upstream = Upstream("http://127.0.0.1:9")
        try:
            return await upstream.call("long", "check", b"{}")
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(call())


@pytest.mark.parametrize("raw", [b"", b"<html>", b"[]", b'{"code":"0"}', b'{"code":true}', b'{"message":"ok"}'])
def test_unusable_envelopes(raw: bytes) -> None:
    with pytest.raises(UpstreamUnusable):
        parse_envelope(raw)


def test_envelope_with_huge_integers_is_usable() -> None:
    answer = _answer(b'{"code":0,"data":{"uin":1688850000000000000123456}}')
    assert answer.ok and answer.data == {"uin": 1688850000000000000123456}


# --- connections: a raw loopback server that controls each connection -------------------
class Layer:
    """An HTTP/1.1 server on loopback whose connections misbehave on request.

    ``idle_close``: seconds after an answer before it closes the connection.
    ``answers_per_connection``: requests answered on one connection; the next
    one is dropped unread and the connection closed, as a server does that
    closes an idle connection just as a request arrives.
    ``answer``: False to close a connection on its first request, unanswered.
    """

    def __init__(self, *, idle_close: float | None = None, answers_per_connection: int | None = None) -> None:
        self.idle_close = idle_close
        self.answers_per_connection = answers_per_connection
        self.answer = True
        self.body = b'{"code": 0,  "message":"ok","data":{"uin":1688850000000000000123456}}'
        self.extra_headers = b""
        self.requests: list[tuple[list[str], bytes]] = []  # (header lines, body) of each request read
        self.connections = 0
        self.closed = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Layer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        answered = 0
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_close)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                if not self.answer or answered == self.answers_per_connection:
                    return  # dropped unread: the body is never read
                lines = head.decode().split("\r\n")[1:-2]
                length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
                self.requests.append((lines, await reader.readexactly(length)))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + self.extra_headers
                    + f"Content-Length: {len(self.body)}\r\n\r\n".encode()
                    + self.body
                )
                await writer.drain()
                answered += 1
        finally:
            self.closed += 1
            self.writers.discard(writer)
            writer.close()


async def _until(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


def test_exact_bytes_and_only_the_content_type_header(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy in the environment is not used.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")

    async def go() -> None:
        layer = await Layer().start()
        layer.extra_headers = b"Set-Cookie: session=1; Path=/\r\n"
        upstream = Upstream(layer.url)
        try:
            for _ in range(2):
                answer = await upstream.call("user", "getProfile", b'{"appid": "x" }')
                assert answer.raw == layer.body and answer.data == {"uin": 1688850000000000000123456}
        finally:
            await upstream.aclose()
            await layer.stop()
        assert layer.connections == 1  # kept alive
        for lines, body in layer.requests:
            assert body == b'{"appid": "x" }'
            headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines}
            # No cookie kept, nothing of aiohttp's own (User-Agent, Accept, Accept-Encoding).
            assert set(headers) == {"host", "content-type", "content-length"}, headers
            assert headers["content-type"] == "application/json"

    asyncio.run(go())


def test_a_connection_closed_while_idle_costs_nothing() -> None:
    async def go() -> None:
        layer = await Layer(idle_close=0.05).start()
        upstream = Upstream(layer.url)
        try:
            await upstream.call("user", "getProfile", b"{}")
            await _until(lambda: layer.closed == 1, "the layer closes the idle connection")
            assert (await upstream.call("user", "getProfile", b"{}")).ok
        finally:
            await upstream.aclose()
            await layer.stop()
        assert (len(layer.requests), layer.connections) == (2, 2)

    asyncio.run(go())


def test_a_pooled_connection_closed_as_the_request_arrives_is_retried_once() -> None:
    async def go() -> None:
        layer = await Layer(answers_per_connection=1).start()
        upstream = Upstream(layer.url)
        try:
            for _ in range(3):
                assert (await upstream.call("device", "create", b'{"n":1}')).ok
        finally:
            await upstream.aclose()
            await layer.stop()
        # Each call after the first found its pooled connection dropped unread and went out once more.
        assert (len(layer.requests), layer.connections) == (3, 3)

    asyncio.run(go())


def test_a_request_that_may_have_been_read_is_not_retried() -> None:
    async def go() -> None:
        layer = await Layer().start()
        layer.answer = False  # a fresh connection ends without an answer
        upstream = Upstream(layer.url)
        try:
            with pytest.raises(UpstreamUnreachable, match="ServerDisconnectedError"):
                await upstream.call("device", "create", b"{}")
        finally:
            await upstream.aclose()
            await layer.stop()
        assert layer.connections == 1

    asyncio.run(go())


def test_a_restarted_layer_is_used_again() -> None:
    async def go() -> None:
        layer = await Layer().start()
        upstream = Upstream(layer.url)
        try:
            await upstream.call("user", "getProfile", b"{}")
            await layer.stop()
            with pytest.raises(UpstreamUnreachable, match="ClientConnectorError"):
                await upstream.call("user", "getProfile", b"{}")
            await layer.start()  # the same port
            assert (await upstream.call("user", "getProfile", b"{}")).ok
        finally:
            await upstream.aclose()
            await layer.stop()
        assert len(layer.requests) == 2

    asyncio.run(go())


def test_redirects_are_not_followed(sink: Sink) -> None:
    sink.set(status=302, location=sink.url)

    async def go() -> None:
        upstream = Upstream(sink.url.removesuffix("/hook"))
        try:
            with pytest.raises(UpstreamUnusable, match="HTTP 302"):
                await upstream.call("long", "check", b"{}")
        finally:
            await upstream.aclose()

    asyncio.run(go())
    assert len(sink.posts()) == 1
