"""Floods for the tests: many requests at once over raw keep-alive HTTP/1.1, from chosen loopback addresses.

Raw sockets, so the client's own work stays small beside the server's; each connection is bound to
its source address (loopback has all of 127.0.0.0/8), which the server sees as the client's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

__all__ = ["SignInFlood", "address", "flood", "request", "sign_ins"]


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
    port: int,
    requests: Sequence[bytes],
    *,
    at_once: int,
    source: Callable[[int], str],
    deadline: float = 60.0,
    answered: Callable[[], None] | None = None,
) -> list[int]:
    """Send ``requests`` over ``at_once`` connections (connection ``i`` from ``source(i)``); their statuses.

    Each connection sends its next request once the last is answered. A connection the server
    closes is opened again; a request it cut off is answered 0 in the list. ``answered`` is
    called after each answer.
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
                if answered is not None:
                    answered()
                if closing:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    await asyncio.gather(*(connection(number) for number in range(at_once)))
    return statuses


def sign_ins(count: int, prefix: str = "stranger") -> list[bytes]:
    """``count`` sign-ins with wrong passwords for logins nobody has, each its own."""
    bodies = (json.dumps({"login": f"{prefix}{n}@example.com", "password": "wrong!"}).encode() for n in range(count))
    return [request("POST", "/console/api/session", body, Content_Type="application/json") for body in bodies]


def _flood_in_process(
    port: int, requests: list[bytes], at_once: int, deadline: float, first: Event, out: Connection
) -> None:
    answers = flood(port, requests, at_once=at_once, source=address, deadline=deadline, answered=first.set)
    statuses = asyncio.run(answers)
    out.send(statuses)
    out.close()


class SignInFlood:
    """:func:`flood` of ``requests`` from ``at_once`` addresses (:func:`address`) in a process of its own, so that
    its client's work does not share a core's time slices or an event loop with the client measured beside it.

    :meth:`wait_answered` returns once the server has answered the flood's first request (the flood is
    under way, its opening burst in the server); :meth:`end` waits for the flood's last answer and
    returns every status.
    """

    def __init__(self, port: int, requests: list[bytes], *, at_once: int, deadline: float = 120.0) -> None:
        self._first = multiprocessing.Event()
        self._statuses, sending = multiprocessing.Pipe(duplex=False)
        self._deadline = deadline
        self._process = multiprocessing.Process(
            target=_flood_in_process, args=(port, requests, at_once, deadline, self._first, sending), daemon=True
        )
        self._process.start()

    def wait_answered(self, timeout: float = 60.0) -> bool:
        return self._first.wait(timeout)

    def end(self) -> list[int]:
        statuses: list[int] = self._statuses.recv() if self._statuses.poll(self._deadline + 30) else []
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        return statuses
