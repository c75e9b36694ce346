"""What the HTTP protocol relies on of uvicorn's own state, pinned against the pinned uvicorn.

Each test drives uvicorn's httptools protocol through
:class:`~receiver.server.uvicornhttp.UvicornHttpTools` (real parser, real
request cycle, a transport that records) and checks one behaviour the
protocol assumes; an upgrade of uvicorn that changes one fails here.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

import receiver.server.httpprotocol
from receiver.server.httpprotocol import OneWriteProtocol
from receiver.server.pressure import Pressure
from receiver.server.turnwriter import TurnWriter
from receiver.server.uvicornhttp import UvicornHttpTools

ROOT = Path(__file__).resolve().parents[3]


class Socketish(asyncio.Transport):
    """A transport that records what it is asked to do (a unit test's stand-in for a socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.paused = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1234), "sockname": ("127.0.0.1", 80)}.get(name, default)

    def sent(self) -> bytes:
        return b"".join(self.writes)


class App:
    """An app that reads what ``receive`` gives, answers only when told, and records what it saw."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answer = asyncio.Event()
        self.read = True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.read:
            self.received.append(await receive())
        await self.answer.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def protocol(app: Any, state: ServerState | None = None) -> tuple[UvicornHttpTools, Socketish]:
    """The adapter over uvicorn's protocol as uvicorn's server makes it, serving a recorded connection."""
    config = uvicorn.Config(app, http=UvicornHttpTools, log_config=None, lifespan="off")
    config.load()
    made = config.http_protocol_class(  # type: ignore[call-arg]  # uvicorn's server calls it so (server.py)
        config=config, server_state=state or ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    assert isinstance(made, UvicornHttpTools)
    socket = Socketish()
    made._attach(socket)
    return made, socket


async def turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_uvicorn_is_the_version_these_pins_were_read_against() -> None:
    # A new uvicorn: read its httptools_impl.py and flow_control.py again, then move this pin.
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(d for d in dependencies if d.startswith("uvicorn"))
    assert pinned.endswith(f"=={uvicorn.__version__}") and uvicorn.__version__ == "0.54.0"


def test_config_takes_the_protocol_class_or_its_import_string() -> None:
    # uvicorn's public extension point: svcgw serve names the protocol by its import string.
    for http in (OneWriteProtocol, "receiver.server.httpprotocol:OneWriteProtocol"):
        config = uvicorn.Config(App(), http=http, log_config=None, lifespan="off")
        config.load()
        assert config.http_protocol_class is OneWriteProtocol


def test_the_parser_callbacks_the_protocol_overrides_are_uvicorns() -> None:
    overridden = {
        "connection_made",
        "connection_lost",
        "data_received",
        "on_message_begin",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
        "on_response_complete",
        "handle_websocket_upgrade",
    }
    for name in overridden:
        assert callable(getattr(HttpToolsProtocol, name)), name
    own = {name for name in vars(OneWriteProtocol) | vars(UvicornHttpTools) if not name.startswith("_")}
    methods = {name for name in own if callable(getattr(OneWriteProtocol, name))}
    # Every public method the two classes define is one of uvicorn's they extend, or their own configure.
    assert methods <= overridden | {"configure"}


def test_attached_uvicorn_counts_the_connection_and_writes_and_pauses_through_the_writer() -> None:
    async def main() -> None:
        state = ServerState()
        made, socket = protocol(App(), state)
        assert isinstance(made.writer, TurnWriter) and made.writer.transport is socket
        assert made.transport is made.writer  # type: ignore[comparison-overlap]  # uvicorn keeps what it was given
        assert made.event_loop is asyncio.get_running_loop()
        assert state.connections == {made} and made._open_connections() == 1
        assert list(made._connections()) == [made]
        # uvicorn's flow control pauses reading on the transport it was given: the writer, then the socket.
        assert not made._reading_paused()
        made.flow.pause_reading()
        assert made._reading_paused() and socket.paused
        made.connection_lost(None)
        assert state.connections == set() and made._open_connections() == 0

    asyncio.run(main())


def test_a_body_the_app_does_not_take_pauses_reading_past_uvicorns_high_water() -> None:
    async def main() -> None:
        app = App()
        app.read = False
        made, _ = protocol(app)
        size = HIGH_WATER_LIMIT + 1
        made.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % size)
        assert not made._reading_paused() and not made._server_not_reading()
        made.data_received(b"x" * size)
        assert made._reading_paused() and made._server_not_reading()
        app.answer.set()
        await turns()

    asyncio.run(main())


def test_a_100_continue_not_yet_sent_is_the_servers_wait_until_the_app_reads() -> None:
    async def main() -> None:
        app = App()
        app.read = False
        made, socket = protocol(app)
        made.data_received(b"POST / HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n")
        await turns()
        assert made._server_not_reading()
        receive = asyncio.ensure_future(made.cycle.receive())
        await asyncio.sleep(0)  # receive writes the 100 before waiting for the body
        assert not made._server_not_reading()
        made.data_received(b"hi")
        assert await receive == {"type": "http.request", "body": b"hi", "more_body": False}
        await turns()
        assert b"HTTP/1.1 100 Continue\r\n\r\n" in socket.sent()
        app.answer.set()
        await turns()

    asyncio.run(main())


def test_an_early_answer_is_written_once_and_the_app_hears_a_disconnect_and_is_not_written() -> None:
    async def main() -> None:
        state = ServerState()
        state.default_headers = [(b"date", b"Sat, 28 Nov 2026 00:00:00 GMT")]
        app = App()
        made, socket = protocol(app, state)
        made.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
        await turns()
        assert made.cycle is not None and not made.cycle.response_started
        made._answer_early(408, b"too slow")
        made._answer_early(408, b"too slow")  # an answer begun is not begun again
        made.writer.close()
        sent = socket.sent()
        assert sent.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and sent.count(b"HTTP/1.1") == 1
        assert b"date: Sat, 28 Nov 2026 00:00:00 GMT\r\n" in sent and b"x-content-type-options: nosniff\r\n" in sent
        assert sent.endswith(b"content-length: 8\r\n\r\ntoo slow")
        # The app's next receive is a disconnect, and what it sends is dropped, not written or refused.
        assert await made.cycle.receive() == {"type": "http.disconnect"}
        app.answer.set()
        await turns()
        assert socket.sent() == sent

    asyncio.run(main())


def test_an_early_answer_after_the_app_began_one_only_ends_the_request() -> None:
    async def main() -> None:
        app = App()
        app.read = False
        made, socket = protocol(app)
        made.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await turns()
        await made.cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        made._answer_early(503, b"full")
        made.writer.flush()
        assert socket.sent().startswith(b"HTTP/1.1 200 OK\r\n") and b"503" not in socket.sent()
        assert made.cycle.disconnected and made.cycle.message_event.is_set()
        app.answer.set()
        await turns()

    asyncio.run(main())


def test_keep_alive_is_armed_with_the_timeout_set_before_each_answer_and_idle_noted() -> None:
    async def main() -> None:
        state = ServerState()
        app = App()
        app.answer.set()
        made, socket = protocol(app, state)
        made.pressure = Pressure(32, 60.0)
        # 21 of 32 connections open: a third of the cap left, so the keep-alive is 60 * (11/32) / 0.5.
        state.connections.update(object() for _ in range(20))
        made.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await turns()
        assert socket.sent().endswith(b"\r\n\r\nok")
        task = made.timeout_keep_alive_task
        assert task is not None and made._idle_since is not None
        expected = 60.0 * (1 - 21 / 32) / 0.5
        assert abs(task.when() - made._idle_since - expected) < 0.5

    asyncio.run(main())


def test_keep_alive_is_the_full_timeout_up_to_half_the_cap_as_the_pressure_reckons_it() -> None:
    async def main() -> None:
        for others in (0, 15):  # with this one, 1 and 16 of 32 connections open: half the cap at most
            state = ServerState()
            app = App()
            app.answer.set()
            made, socket = protocol(app, state)
            made.pressure = Pressure(32, 60.0)
            state.connections.update(object() for _ in range(others))
            made.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            await turns()
            assert socket.sent().endswith(b"\r\n\r\nok")
            assert made.timeout_keep_alive == 60.0 == made.pressure.keepalive_now(others + 1)
            task = made.timeout_keep_alive_task
            assert task is not None and made._idle_since is not None
            assert abs(task.when() - made._idle_since - 60.0) < 0.5

    asyncio.run(main())


def test_a_websocket_is_handed_the_socket_with_what_was_written_sent() -> None:
    async def main() -> None:
        made, socket = protocol(App())
        made.writer.write(b"written")
        made._hand_back_socket()
        assert made.transport is socket and socket.writes == [b"written"]
        # uvicorn hands its transport to the WebSocket protocol and switches the socket to it.
        source = inspect.getsource(HttpToolsProtocol.handle_websocket_upgrade)
        assert "protocol.connection_made(self.transport)" in source
        assert "self.transport.set_protocol(protocol)" in source

    asyncio.run(main())


# uvicorn's attributes the adapter reads or writes on the protocol's behalf.
_UVICORNS = {
    "loop",
    "transport",
    "connections",
    "tasks",
    "cycle",
    "flow",
    "server_state",
    "timeout_keep_alive",
    "timeout_keep_alive_task",
    "parser",
    "pipeline",
    "scope",
    "headers",
}


def test_the_protocol_itself_reads_and_writes_none_of_uvicorns_state() -> None:
    tree = ast.parse(inspect.getsource(receiver.server.httpprotocol))
    reached = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    assert reached & _UVICORNS == set()
    assert not re.search(r"^\s*(from|import) uvicorn", inspect.getsource(receiver.server.httpprotocol), re.M)
