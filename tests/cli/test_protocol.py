"""The server's protocol: one write per turn of the event loop, in order; slow clients closed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from cli.protocol import OneWriteProtocol, TurnWriter
from tests.support import free_port, wait_for


class Recording(asyncio.Transport):
    """A transport that keeps what it is asked to write (a unit test's stand-in for a socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1234)}.get(name, default)


def test_the_writes_of_one_turn_become_one_write_at_its_end() -> None:
    async def main() -> None:
        transport = Recording()
        writer = TurnWriter(transport, asyncio.get_running_loop())
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        writer.write(bytearray(b"body"))
        assert transport.writes == []  # not before the turn ends
        await asyncio.sleep(0)
        assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        writer.writelines([b"a", b"", b"b"])  # a later turn: a write of its own
        await asyncio.sleep(0)
        assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"ab"]
        # Everything else is the transport's own.
        assert writer.get_extra_info("peername") == ("127.0.0.1", 1234)

    asyncio.run(main())


def test_closing_sends_what_was_written_first_and_a_closed_socket_gets_nothing() -> None:
    async def main() -> None:
        transport = Recording()
        writer = TurnWriter(transport, asyncio.get_running_loop())
        writer.write(b"last words")
        assert writer.get_write_buffer_size() == len(b"last words")
        writer.close()
        assert transport.writes == [b"last words"] and transport.closed
        writer.write(b"too late")
        await asyncio.sleep(0)
        assert transport.writes == [b"last words"]

    asyncio.run(main())


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"first ", "more_body": True})
    await asyncio.sleep(0.05)  # a later turn: streamed, not held back
    await send({"type": "http.response.body", "body": b"second"})


@contextlib.contextmanager
def serving(app: Any) -> Iterator[int]:
    """``app`` behind uvicorn with the protocol, in a thread; its port."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=OneWriteProtocol, log_config=None, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=20, interval=0.01, what="the server")
        yield port
    finally:
        server.should_exit = True
        thread.join(20)


def test_a_server_with_the_protocol_answers_streamed_and_kept_alive_requests_byte_for_byte() -> None:
    with serving(_app) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            for _ in range(2):  # the same connection twice: keep-alive works through the writer
                conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                received = b""
                while not received.endswith(b"0\r\n\r\n"):
                    chunk = conn.recv(65536)
                    assert chunk, received
                    received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in head
                assert body == b"6\r\nfirst \r\n6\r\nsecond\r\n0\r\n\r\n"


async def _slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await asyncio.sleep(0.6)  # longer than the header timeout: the server's own time, not the client's
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def test_slow_heads_and_stalled_bodies_are_closed_but_a_slow_answer_or_a_moving_body_is_not(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 0.4)
    with serving(_slow_app) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            # A body in pieces, each within the timeout though the whole takes longer: answered.
            conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
            for piece in (b"ab", b"cd", b"ef"):
                time.sleep(0.25)
                conn.sendall(piece)
            assert conn.recv(65536).endswith(b"\r\n\r\nabcdef")
        for stalled in (b"GET / HTTP/1.1\r\nHost: x\r\n", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nab"):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(stalled)
                started = time.monotonic()
                assert conn.recv(65536) == b""  # closed by the server, with nothing said
                assert 0.3 < time.monotonic() - started < 2.5
