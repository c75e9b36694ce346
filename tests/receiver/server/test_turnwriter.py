"""The transport that writes what one turn of the event loop wrote as one write, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from receiver.server.turnwriter import TurnWriter


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
