"""The HTTP/1.1 protocol of ``svcgw serve``: uvicorn's httptools protocol, each answer in one write.

uvicorn writes an answer's status line and headers to the socket when the
app sends ``http.response.start``, and its body with each
``http.response.body``: two ``write`` system calls for every answer, each a
trip through the loopback or network stack, and at c=50 the costliest
single line of a gateway call. :class:`OneWriteProtocol` gives uvicorn's
protocol a transport that keeps what is written during one turn of the
event loop and writes it at the end of that turn (or before closing), in
order, as one piece. Nothing else changes: the bytes on the wire are the
same, and no answer waits longer than the turn it was written in.

It also sheds slow clients itself, with or without a proxy in front: a
request whose head has not arrived within :attr:`OneWriteProtocol.header_timeout`
seconds (``SVCGW_HTTP_HEADER_TIMEOUT``) of its first byte (or of the
connection, before any byte), or whose body stalls that long, has its
connection closed. One timer per connection does it (``loop.call_later``,
re-armed only when it fires while a request is being read); a request reading
its head or body notes the time it moved, nothing more.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneWriteProtocol", "TurnWriter"]

# What a connection is reading: a request's head, its body, or nothing (answering, or idle between requests).
_HEAD, _BODY, _IDLE = 0, 1, 2


class TurnWriter:
    """A transport whose writes of one turn of the event loop reach the socket as one write."""

    __slots__ = ("_loop", "_pending", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._pending = []
        self.transport.abort()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(len(part) for part in self._pending)

    # Called on every request: spelt out rather than found through __getattr__.
    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def __getattr__(self, name: str) -> Any:
        # Everything else (extra info, set_protocol, ...) is the socket's own.
        return getattr(self.transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a :class:`TurnWriter`, closing on slow heads and bodies."""

    # SVCGW_HTTP_HEADER_TIMEOUT: set by cli.runner before the server starts (each process of several too).
    header_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        writer = TurnWriter(transport, self.loop)
        super().connection_made(writer)  # type: ignore[arg-type]
        self._reading = _HEAD
        self._since = self.loop.time()
        self._deadline: asyncio.TimerHandle | None = self.loop.call_later(self.header_timeout, self._late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    # --- the clock of the request being read -------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading = _HEAD
        self._since = self.loop.time()
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._late)

    def on_headers_complete(self) -> None:
        self._reading = _BODY
        self._since = self.loop.time()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._since = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading = _IDLE
        super().on_message_complete()

    def _late(self) -> None:
        """The timer: close the connection if the head or body it reads made no way in time, else wait on."""
        self._deadline = None
        if self._reading == _IDLE or self.transport.is_closing():
            return  # the next request's first byte arms it again
        now = self.loop.time()
        if self._reading == _BODY and (self.flow.read_paused or (self.cycle and self.cycle.waiting_for_100_continue)):
            self._since = now  # the server is the one not reading: not the client's stall
        left = self._since + self.header_timeout - now
        if left > 0:
            self._deadline = self.loop.call_later(left, self._late)
            return
        self.transport.close()

    def _stop_timer(self) -> None:
        self._reading = _IDLE
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def handle_websocket_upgrade(self) -> None:
        self._stop_timer()
        # A WebSocket protocol gets the socket's own transport, with what was written so far sent.
        if isinstance(self.transport, TurnWriter):
            writer = self.transport
            writer.flush()
            self.transport = writer.transport
        super().handle_websocket_upgrade()
