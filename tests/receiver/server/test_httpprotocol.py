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

from receiver.server.addressshare import AddressShare
from receiver.server.httpprotocol import OneWriteProtocol, body_due
from receiver.server.pressure import Pressure
from tests.support import free_port, wait_for


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"first ", "more_body": True})
    await asyncio.sleep(0.05)  # a later turn: streamed, not held back
    await send({"type": "http.response.body", "body": b"second"})


@contextlib.contextmanager
def serving(app: Any, **options: Any) -> Iterator[int]:
    """``app`` behind uvicorn with the protocol (and uvicorn's ``options``), in a thread; its port."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=OneWriteProtocol, log_config=None, lifespan="off", **options
    )
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
        stalled = {
            b"GET / HTTP/1.1\r\nHost: x\r\n": b"",  # a head: closed by the server, with nothing said
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nab": b"HTTP/1.1 408 ",  # a body: 408
        }
        for sent, answer in stalled.items():
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(sent)
                started = time.monotonic()
                assert read_until_closed(conn).startswith(answer)
                assert 0.3 < time.monotonic() - started < 2.5


def read_until_closed(conn: socket.socket, limit: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closing)."""
    received = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"still open after {limit}s, having sent {received!r}")


def connect_from(address: str, port: int) -> socket.socket:
    """A connection to the server from ``address`` (any 127.x.y.z stands for a client of its own)."""
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(address, 0))


async def _reading_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body and answers its size; on ``/early``, answers before reading any of it."""
    if scope["type"] != "http":
        return
    size = 0
    if scope["path"] != "/early":
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
    answer = b"%d" % size
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


def test_the_body_deadline_is_mod_reqtimeouts() -> None:
    # body=20,MinRate=500: 20 s after the head, a second more for every 500 bytes in.
    assert body_due(100.0, 0, 20.0, 1 / 500) == 120.0
    assert body_due(100.0, 5000, 20.0, 1 / 500) == 130.0
    assert body_due(100.0, 5000, 20.0, 0.0) == 120.0  # no minimum rate: a fixed deadline
    # A byte a second is past it once 20 + t/500 < t: just after 20 s.
    assert body_due(0.0, 21, 20.0, 1 / 500) < 21
    # 1 MiB at 32 KB/s (a slow mobile link, 256 kbit/s) never is: at each second t, 20 + 64 t > t.
    assert all(body_due(0.0, 32_000 * t, 20.0, 1 / 500) > t for t in range(1, 34))


def test_a_body_under_the_minimum_rate_is_answered_408_and_one_over_it_gets_in(monkeypatch: Any) -> None:
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 5.0)  # no piece below stalls that long
    monkeypatch.setattr(OneWriteProtocol, "body_timeout", 1.0)
    monkeypatch.setattr(OneWriteProtocol, "body_seconds_per_byte", 1 / 1000)
    monkeypatch.setattr(OneWriteProtocol, "shares", None)
    with serving(_reading_app) as port:
        # 6,000 bytes at about 2,000 bytes/s: three times the 1 s deadline, yet answered.
        with connect_from("127.0.0.1", port) as conn:
            conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6000\r\nConnection: close\r\n\r\n")
            for _ in range(12):
                time.sleep(0.25)
                conn.sendall(b"x" * 500)
            assert read_until_closed(conn).endswith(b"\r\n\r\n6000")

        # A byte every 0.2 s: each piece moves well within the stall limit, the whole too slowly.
        with connect_from("127.0.0.1", port) as conn:
            conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            started = time.monotonic()
            conn.setblocking(False)
            answer = b""
            while time.monotonic() - started < 5:
                with contextlib.suppress(OSError):
                    conn.send(b"x")
                time.sleep(0.2)
                with contextlib.suppress(BlockingIOError):
                    chunk = conn.recv(65536)
                    answer += chunk
                    if not chunk:
                        break
            elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head and b"x-content-type-options: nosniff" in head
        assert body == b"request body timed out"
        assert 0.9 < elapsed < 2.5, elapsed

        # An answer already on its way is not followed by a 408: the slow body's connection just closes.
        with connect_from("127.0.0.1", port) as conn:
            conn.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
            started = time.monotonic()
            received = read_until_closed(conn)
            assert received.startswith(b"HTTP/1.1 200 ") and received.count(b"HTTP/1.1") == 1, received
            assert time.monotonic() - started < 2.5


def test_one_address_holds_at_most_its_share_and_others_keep_theirs(monkeypatch: Any) -> None:
    shares = AddressShare(2, exempt=["127.0.0.9/32"])
    monkeypatch.setattr(OneWriteProtocol, "shares", shares)
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 10.0)
    with serving(_reading_app) as port, contextlib.ExitStack() as stack:
        held = [stack.enter_context(connect_from("127.0.0.2", port)) for _ in range(2)]
        for conn in held:
            conn.sendall(b"GET / HTTP/1.1\r\n")  # half a head: each holds its place
        wait_for(lambda: shares.held("127.0.0.2") == 2, timeout=5, what="both connections counted")

        # A third from the same address is closed at once, unread and unanswered...
        with connect_from("127.0.0.2", port) as third:
            third.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            started = time.monotonic()
            assert read_until_closed(third) == b""
            assert time.monotonic() - started < 2.0
        # ...while another address is answered, and a peer named exempt (a proxy) is not counted.
        for address in ("127.0.0.3", "127.0.0.9", "127.0.0.9", "127.0.0.9"):
            conn = stack.enter_context(connect_from(address, port))
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 ")
        assert shares.held("127.0.0.2") == 2 and shares.held("127.0.0.9") == 0

        # Once one of its connections closes, the address has room again.
        held[0].close()
        wait_for(lambda: shares.held("127.0.0.2") == 1, timeout=5, what="the closed connection given back")
        with connect_from("127.0.0.2", port) as again:
            again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert again.recv(65536).startswith(b"HTTP/1.1 200 ")


_released = threading.Event()  # lets the requests of _holding_app answer


async def _holding_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """On ``/hold``, reads the body and answers once ``_released`` is set: a request being answered, at length."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/hold":
        while (await receive()).get("more_body"):
            pass
        while not _released.is_set():
            await asyncio.sleep(0.05)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"held"})
        return
    await _reading_app(scope, receive, send)


def body_head(size: int, path: bytes = b"/") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path, size)


def closed_with(conn: socket.socket) -> bytes | None:
    """What the server said before closing ``conn``; None while it is open."""
    timeout = conn.gettimeout()
    conn.setblocking(False)
    received = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return received
            received += chunk
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return received
    finally:
        conn.settimeout(timeout)


def test_near_the_cap_room_is_made_idle_connections_first_then_the_slowest_bodies(monkeypatch: Any) -> None:
    # A cap of 32: past 30 open connections a new one sheds others down to 28.
    monkeypatch.setattr(OneWriteProtocol, "pressure", Pressure(32, 60.0))
    monkeypatch.setattr(OneWriteProtocol, "shares", None)
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 60.0)
    monkeypatch.setattr(OneWriteProtocol, "body_timeout", 60.0)
    _released.clear()
    with contextlib.ExitStack() as stack:
        stack.callback(_released.set)  # before the server stops: it waits for the held requests
        port = stack.enter_context(serving(_holding_app, limit_concurrency=32, timeout_keep_alive=60))
        stack.callback(_released.set)

        def connect() -> socket.socket:
            return stack.enter_context(connect_from("127.0.0.2", port))

        # 22 requests being answered: never shed, the server's own work.
        answering = [connect() for _ in range(22)]
        for conn in answering:
            conn.sendall(body_head(2, b"/hold") + b"ok")
        # 3 idle keep-alive connections, each after an answered request.
        idle = [connect() for _ in range(3)]
        for conn in idle:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 ")
        # 2 bodies that barely move, then 3 that move faster (300, 600 and 900 of 1,000 bytes in).
        slow = [connect() for _ in range(2)]
        for conn in slow:
            conn.sendall(body_head(1000) + b"x")
        faster = [connect() for _ in range(3)]
        for number, conn in enumerate(faster, 1):
            conn.sendall(body_head(1000) + b"x" * 300 * number)
        time.sleep(0.7)  # all 30 read by the server, and the idle ones idle past their grace (0.5 s)

        def new_client() -> bytes:
            with connect_from("127.0.0.3", port) as conn:
                conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return read_until_closed(conn)

        # The 31st connection: the three idle ones make room, and it is answered (not 503).
        assert new_client().startswith(b"HTTP/1.1 200 ")
        wait_for(lambda: all(closed_with(conn) == b"" for conn in idle), timeout=5, what="the idle ones closed")
        assert all(closed_with(conn) is None for conn in [*answering, *slow, *faster])

        # Three more requests being answered, and a new client again: now the slowest bodies make room,
        # answered 503 (the two that barely moved, then the slower of those that moved).
        for _ in range(3):
            answering.append(connect())
            answering[-1].sendall(body_head(2, b"/hold") + b"ok")
        time.sleep(0.2)
        assert new_client().startswith(b"HTTP/1.1 200 ")
        shed = [*slow, faster[0]]
        wait_for(lambda: all(closed_with(conn) is not None for conn in shed), timeout=5, what="the slowest closed")
        assert all(closed_with(conn) is None for conn in [*answering, *faster[1:]])

        # The faster bodies, once in, are answered; and so are the held requests once released.
        for conn in faster[1:]:
            conn.sendall(b"x" * (1000 - 300 * (faster.index(conn) + 1)))
            assert conn.recv(65536).endswith(b"\r\n\r\n1000")
        _released.set()
        for conn in answering:
            assert conn.recv(65536).endswith(b"\r\n\r\nheld")


def test_a_shed_body_is_answered_503_with_retry_after(monkeypatch: Any) -> None:
    monkeypatch.setattr(OneWriteProtocol, "pressure", Pressure(32, 60.0))
    monkeypatch.setattr(OneWriteProtocol, "shares", None)
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 60.0)
    monkeypatch.setattr(OneWriteProtocol, "body_timeout", 60.0)
    with serving(_reading_app, limit_concurrency=32) as port, contextlib.ExitStack() as stack:
        bodies = [stack.enter_context(connect_from("127.0.0.2", port)) for _ in range(30)]
        for conn in bodies:
            conn.sendall(body_head(1000) + b"x")
        time.sleep(0.2)
        with connect_from("127.0.0.3", port) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_until_closed(conn).startswith(b"HTTP/1.1 200 ")
        # Three of the equally slow bodies made room, each told so.
        said: dict[int, bytes] = {}

        def three_shed() -> bool:
            for number, conn in enumerate(bodies):
                answer = None if number in said else closed_with(conn)
                if answer is not None:
                    said[number] = answer
            return len(said) >= 3

        wait_for(three_shed, timeout=5, what="three shed")
        time.sleep(0.2)
        three_shed()
        assert len(said) == 3, said
        for answer in said.values():
            head, _, text = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head and b"connection: close" in head
            assert text == b"the server is full; send again"


def test_keep_alive_shortens_as_the_cap_fills(monkeypatch: Any) -> None:
    # A keep-alive of 20 s; with 29 of 32 connections open, an idle connection is kept under 4 s.
    monkeypatch.setattr(OneWriteProtocol, "pressure", Pressure(32, 20.0))
    monkeypatch.setattr(OneWriteProtocol, "shares", None)
    monkeypatch.setattr(OneWriteProtocol, "header_timeout", 60.0)
    _released.clear()
    with contextlib.ExitStack() as stack:
        stack.callback(_released.set)
        port = stack.enter_context(serving(_holding_app, limit_concurrency=32, timeout_keep_alive=20))
        stack.callback(_released.set)
        with connect_from("127.0.0.3", port) as alone:
            # Alone, the connection is kept the whole keep-alive timeout.
            alone.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert alone.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(3.0)
            assert closed_with(alone) is None
        for _ in range(28):
            conn = stack.enter_context(connect_from("127.0.0.2", port))
            conn.sendall(body_head(2, b"/hold") + b"ok")
        time.sleep(0.2)
        with connect_from("127.0.0.3", port) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            assert read_until_closed(conn, limit=15.0) == b""
            # 20 s x (3/32 of the cap left) / half = 3.75 s; well under the 20 s it would be kept alone.
            assert time.monotonic() - started < 12.0
