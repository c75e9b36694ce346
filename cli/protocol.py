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
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneWriteProtocol", "TurnWriter"]


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
    """uvicorn's httptools protocol writing through a :class:`TurnWriter`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        writer = TurnWriter(transport, self.loop)
        super().connection_made(writer)  # type: ignore[arg-type]

    def handle_websocket_upgrade(self) -> None:
        # A WebSocket protocol gets the socket's own transport, with what was written so far sent.
        if isinstance(self.transport, TurnWriter):
            writer = self.transport
            writer.flush()
            self.transport = writer.transport
        super().handle_websocket_upgrade()
