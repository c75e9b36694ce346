"""A transport whose writes of one turn of the event loop reach the socket as one write.

uvicorn writes an answer's status line and headers when the app sends
``http.response.start``, and its body with each ``http.response.body``: two
``write`` system calls for every answer. Written through a :class:`TurnWriter`,
what one turn of the event loop writes is kept and written at the end of that
turn (or before closing), in order, as one piece: the same bytes on the wire,
none later than the turn they were written in.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["TurnWriter"]


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
