"""A flood that holds a server's connections: slow bodies and idle keep-alive connections from many addresses.

Half the addresses each keep ``wanted`` connections trickling a sign-in body at the minimum rate
(500 bytes/s, the default ``SVCGW_HTTP_BODY_MIN_RATE``), the other half ``wanted`` keep-alive
connections that ask for ``/healthz`` every 4 s; a connection the server closes (or refuses) is opened
again, as an attacker would. It runs on the caller's event loop until :meth:`Flood.end` or its
``stop`` time, and counts what it holds. Used by ``tests/cli/test_connection_floods.py`` and the
benchmark's ``tests/bench/connection_floods.py``, with :func:`other_client`, the client at another
address whose calls are measured meanwhile.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import httpx

from tests.receiver.floods import address

__all__ = ["Calls", "Flood", "FloodProcess", "other_client"]

# A sign-in trickled at the minimum rate: under the 8 KiB cap of bodies sent before signing in
# (receiver.openbodies), and 16 s to send in full, longer than a flood here lasts.
SLOW_BODY = 8000
SLOW_HEAD = (
    b"POST /console/api/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n{" % SLOW_BODY
)
PING = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass
class Flood:
    """The flood's own count of the connections it holds open, and the most it held at once."""

    port: int
    addresses: int
    wanted: int  # connections each address tries to keep open
    stop: float
    open: int = 0
    most: int = 0
    opened: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def _connect(self, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            pair = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.1)
            return None
        self.opened += 1
        self.open += 1
        self.most = max(self.most, self.open)
        return pair

    async def slow_body(self, source: str) -> None:
        """A body of SLOW_BODY bytes at 500 bytes/s, opened again whenever the server closes it."""
        while time.monotonic() < self.stop:
            pair = await self._connect(source)
            if pair is None:
                continue
            _, writer = pair
            try:
                writer.write(SLOW_HEAD)
                for _ in range(SLOW_BODY // 250):
                    await asyncio.sleep(0.5)
                    if writer.is_closing() or time.monotonic() > self.stop:
                        break
                    writer.write(b" " * 250)
            except OSError:
                pass
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(0.05)

    async def idle(self, source: str) -> None:
        """A keep-alive connection that asks for /healthz every 4 s, opened again whenever the server closes it."""
        while time.monotonic() < self.stop:
            pair = await self._connect(source)
            if pair is None:
                continue
            reader, writer = pair
            try:
                while time.monotonic() < self.stop:
                    writer.write(PING)
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                    await reader.readexactly(length)
                    await asyncio.sleep(4.0)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, IndexError, ValueError):
                pass
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(0.05)

    def start(self) -> None:
        for number in range(self.addresses):
            task = self.slow_body if number % 2 == 0 else self.idle
            for _ in range(self.wanted):
                self.tasks.append(asyncio.ensure_future(task(address(number))))

    async def end(self) -> None:
        self.stop = 0.0
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 30)


def _flood_until(port: int, addresses: int, wanted: int, longest: float, stop: Event, out: Connection) -> None:
    async def run() -> Flood:
        flood = Flood(port, addresses, wanted, time.monotonic() + longest)
        flood.start()
        while not stop.is_set() and time.monotonic() < flood.stop:
            await asyncio.sleep(0.1)
        await flood.end()
        return flood

    flood = asyncio.run(run())
    out.send({"most": flood.most, "opened": flood.opened})
    out.close()


class FloodProcess:
    """A :class:`Flood` in a process of its own (its work does not slow the measured client's event loop),
    until :meth:`end` or ``longest`` seconds; :meth:`end` returns its counts (``most``, ``opened``)."""

    def __init__(self, port: int, addresses: int, wanted: int, longest: float = 60.0) -> None:
        self._stop = multiprocessing.Event()
        self._counts, sending = multiprocessing.Pipe(duplex=False)
        self._process = multiprocessing.Process(
            target=_flood_until, args=(port, addresses, wanted, longest, self._stop, sending), daemon=True
        )
        self._process.start()

    def end(self) -> dict[str, int]:
        self._stop.set()
        counts: dict[str, int] = self._counts.recv() if self._counts.poll(60) else {}
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        return counts


@dataclass
class Calls:
    """The other client's calls: whether each was answered 2xx, and in how long."""

    outcomes: list[tuple[str, bool, float]] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # what each call that was not answered 2xx met

    def good(self, within: float) -> int:
        return sum(1 for _, ok, took in self.outcomes if ok and took < within)


async def other_client(
    base: str, key: str, receiver: str, seconds: float, calls: Calls, *, source: str = "127.0.0.3", most: int = 300
) -> None:
    """From ``source``: /healthz, a gateway call and a receiver post, in turn, for ``seconds`` (at most ``most``
    calls); each outcome in ``calls``.

    A connection of its own for each call: a kept-alive connection that the server closes as idle just as
    the next call goes out fails that call in any HTTP/1.1 client that does not send it again (browsers
    do), and what is measured here is whether the server answers, not that race.
    """
    transport = httpx.AsyncHTTPTransport(local_address=source, limits=httpx.Limits(max_keepalive_connections=0))
    async with httpx.AsyncClient(base_url=base, timeout=5, transport=transport, trust_env=False) as client:
        device = {"appid": "", "type": "iPad", "name": "t", "version": 0}
        event = b'{"event_type":"Msg","events":[{"id":"%d"}]}'

        async def send(name: str, number: int) -> httpx.Response:
            if name == "healthz":
                return await client.get("/healthz")
            if name == "gateway":
                return await client.post("/svc/api/device/create", json=device, headers={"Svc-Key": key})
            return await client.post(receiver, content=event % number)

        ends = time.monotonic() + seconds
        number = 0
        while time.monotonic() < ends and len(calls.outcomes) < most:
            for name in ("healthz", "gateway", "receiver"):
                number += 1
                started = time.monotonic()
                try:
                    answer = await send(name, number)
                    ok = 200 <= answer.status_code < 300 and (name != "gateway" or answer.json()["code"] == 0)
                    if not ok:
                        calls.why.append(f"{name}: {answer.status_code} {answer.text[:80]}")
                except httpx.HTTPError as exc:
                    ok = False
                    calls.why.append(f"{name}: {exc!r}")
                calls.outcomes.append((name, ok, time.monotonic() - started))
            await asyncio.sleep(0.1)
