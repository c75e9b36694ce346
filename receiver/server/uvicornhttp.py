"""Everything svcgw's HTTP protocol reads or writes of uvicorn's httptools protocol, in one place.

uvicorn's public way to change how it speaks HTTP is ``Config(http=...)``,
a protocol class of one's own; ``svcgw serve`` names
:class:`~receiver.server.httpprotocol.OneWriteProtocol` there, and uses the
options uvicorn has for the rest: its cap of connections
(``limit_concurrency``, answered 503 past it) and its keep-alive timeout
(``timeout_keep_alive``). What upstream (uvicorn 0.54.0, as pinned) lacks,
and so is done by extending its ``HttpToolsProtocol`` here:

* no deadline for a request's head or body: it reads for as long as a client
  sends, a byte a minute included; the protocol's clock hangs on the
  httptools parser callbacks uvicorn implements (``on_message_begin``,
  ``on_headers_complete``, ``on_body``, ``on_message_complete``), each
  overridden to note the time and call uvicorn's;
* no limit of connections per client address, nor a way to make room near
  the cap: it refuses every new request past ``limit_concurrency``, and
  keeps the set of open connections (``server_state.connections``) to
  itself;
* no keep-alive timeout that changes while serving: it arms the timer with
  ``self.timeout_keep_alive`` after each answer, so that is set just before;
* no way to answer a request the app has not answered, nor to tell the app
  its request is over but by the connection closing: the request's cycle
  (``response_started``, ``disconnected``, ``message_event``) is set as
  ``connection_lost`` would set it;
* no way to write an answer's head and body in one write: the transport it
  is given is a :class:`~receiver.server.turnwriter.TurnWriter`, and a
  WebSocket it hands the connection to gets the socket's own back.

Every read or write of uvicorn's own attributes is here, none in the
protocol built on it; ``tests/receiver/server/test_uvicornhttp.py`` pins
each against the pinned uvicorn, so an upgrade that changes one fails there,
not in production. Nothing here adds work to a request: the methods the hot
path runs (``on_response_complete``) are uvicorn's own, overridden once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from receiver.headers import NOSNIFF

from .turnwriter import TurnWriter

if TYPE_CHECKING:
    from .pressure import Pressure

__all__ = ["UvicornHttpTools"]


class UvicornHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, with what a protocol built on it needs of uvicorn's state as methods."""

    # The connections near the cap (receiver.server.pressure); set by the protocol's configure.
    pressure: Pressure | None = None
    # Since when the connection has waited for a request's first byte; None while one is read or answered.
    _idle_since: float | None = None
    # This connection's event loop (uvicorn's ``loop``), and the transport uvicorn writes through.
    event_loop: asyncio.AbstractEventLoop
    writer: TurnWriter

    def _attach(self, transport: asyncio.Transport) -> None:
        """Start serving on ``transport``: uvicorn writes through a :class:`TurnWriter` of it."""
        self.event_loop = self.loop
        self.writer = TurnWriter(transport, self.loop)
        # uvicorn counts the connection among its own, and keeps the writer as its transport
        # (its flow control pauses and resumes reading on it, its cycles write to it).
        super().connection_made(self.writer)  # type: ignore[arg-type]

    def _open_connections(self) -> int:
        """The connections this server process has open (uvicorn's, this one among them)."""
        return len(self.connections)

    def _connections(self) -> Iterable[asyncio.Protocol]:
        return self.connections

    def _reading_paused(self) -> bool:
        """Whether uvicorn stopped reading the body (the app has not taken what came): the server's time."""
        return self.flow.read_paused

    def _server_not_reading(self) -> bool:
        """Whether the server, not the client, is why the body does not move: paused, or a 100 not yet sent."""
        return self.flow.read_paused or bool(self.cycle and self.cycle.waiting_for_100_continue)

    def _answer_early(self, status: int, text: bytes, headers: bytes = b"") -> None:
        """``status`` for a body the server will not wait for, unless an answer has begun; the app hears a
        disconnect."""
        cycle = self.cycle
        if cycle is None:
            return
        if not cycle.response_started:
            content = [STATUS_LINE[status]]
            for name, value in [*self.server_state.default_headers, NOSNIFF]:
                content.extend([name, b": ", value, b"\r\n"])
            content.append(b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n%s" % headers)
            content.append(b"content-length: %d\r\n\r\n%s" % (len(text), text))
            self.writer.write(b"".join(content))
            cycle.response_started = True
        # What connection_lost would do a turn later: whatever the app sends from now on is dropped.
        cycle.disconnected = True
        cycle.message_event.set()

    def _hand_back_socket(self) -> None:
        """Before a WebSocket takes the connection over: uvicorn hands it ``self.transport``, the socket's own,
        with what was written so far sent."""
        if isinstance(self.transport, TurnWriter):
            self.transport.flush()
            self.transport = self.transport.transport

    def on_response_complete(self) -> None:
        pressure = self.pressure
        if pressure is not None:
            # The fuller the server, the sooner an idle keep-alive connection gives its place back.
            # (uvicorn types it a whole number of seconds; it only ever passes it to call_later.)
            # Up to half the cap it is the full timeout: said here, without two calls on every answer.
            connections = len(self.connections)
            if 2 * connections <= pressure.cap:
                self.timeout_keep_alive = pressure.keepalive  # type: ignore[assignment]
            else:
                self.timeout_keep_alive = pressure.keepalive_now(connections)  # type: ignore[assignment]
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # waiting for the next request, not answering a pipelined one
            self._idle_since = self.loop.time()
