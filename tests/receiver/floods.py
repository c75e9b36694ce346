"""Floods for the tests: many requests at once over raw keep-alive HTTP/1.1, from chosen loopback addresses.

Raw sockets, so the client's own work stays small beside the server's; each connection is bound to
its source address (loopback has all of 127.0.0.0/8), which the server sees as the client's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence

__all__ = ["address", "flood", "request"]


def address(number: int) -> str:
    """The ``number``-th loopback address from 127.0.1.1 on (127.0.0.x is left to the tests' own clients)."""
    return f"127.0.{1 + number // 250}.{1 + number % 250}"


def request(method: str, target: str, body: bytes = b"", **headers: str) -> bytes:
    """One HTTP/1.1 request, as sent."""
    lines = [f"{method} {target} HTTP/1.1", "Host: svcgw.test", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """The status of one answer, read whole, and whether the server closes the connection after it."""
    head = (await reader.readuntil(b"\r\n\r\n")).lower()
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status, b"connection: close" in head


async def flood(
    port: int, requests: Sequence[bytes], *, at_once: int, source: Callable[[int], str], deadline: float = 60.0
) -> list[int]:
    """Send ``requests`` over ``at_once`` connections (connection ``i`` from ``source(i)``); their statuses.

    Each connection sends its next request once the last is answered. A connection the server
    closes is opened again; a request it cut off is answered 0 in the list.
    """
    pending: Iterator[bytes] = iter(requests)
    statuses: list[int] = []
    stop = time.monotonic() + deadline

    async def connection(number: int) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        try:
            for sent in pending:
                if time.monotonic() > stop:
                    raise AssertionError("the flood did not end in time")
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source(number), 0))
                assert reader is not None
                writer.write(sent)
                try:
                    status, closing = await asyncio.wait_for(_answer(reader), stop - time.monotonic())
                except (asyncio.IncompleteReadError, ConnectionError):
                    status, closing = 0, True
                statuses.append(status)
                if closing:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    await asyncio.gather(*(connection(number) for number in range(at_once)))
    return statuses
