"""A fast HTTP sink for the benchmark: uvloop and httptools, many ports, driven over stdin.

Run as ``python -m tests.bench.sink``. It reads one command per line on
stdin and answers each with one JSON line on stdout:

* ``listen MODE N [DELAY]``: open N ports on 127.0.0.1 answering in MODE
  (``fast``: 200 at once; ``slow``: 200 after DELAY seconds; ``hang``: read
  the request and never answer; ``shared``: one host of many accounts' paths,
  where a path under ``/m`` answers after DELAY seconds, or never with no DELAY,
  and any other path at once); answers ``{"ports": [...]}``;
* ``stats``: ``{"count": ..., "by_mode": {...}}``, requests received so far (a
  ``shared`` port's as ``shared-m`` and ``shared``, by path);
* ``arrivals``: ``{"arrivals": [[event id, unix time], ...]}``, the first
  event id of each body received since the last ``arrivals``, and forgets them;
* ``reset``: zero the counters and forget the arrivals.

It does no signature checks: the test suite verifies signatures; here the
sink must cost as little CPU as possible so that it is never the bottleneck.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections import Counter
from typing import Any, cast

import httptools
import orjson

FIRST_ID = re.compile(rb'"events":\[\{"id":"?([^",}]*)')
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: application/json\r\n\r\n{\"ok\":true}"


class State:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.arrivals: list[tuple[str, float]] = []
        self.hung: list[asyncio.Transport] = []


class SinkProtocol(asyncio.Protocol):
    def __init__(self, state: State, mode: str, delay: float) -> None:
        self.state = state
        self.mode = mode
        self.delay = delay
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []
        self.path = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        if self.mode == "hang":
            self.state.hung.append(self.transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_begin(self) -> None:
        self.body = []
        self.path = b""

    def on_url(self, url: bytes) -> None:
        self.path += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        now = time.time()
        body = b"".join(self.body)
        mode = self.mode
        if mode == "shared" and self.path.startswith(b"/m"):
            # The paths of the account whose endpoints are slow or hang, on the host of the others.
            self.state.counts["shared-m"] += 1
            mode = "slow" if self.delay else "hang"
            if mode == "hang" and self.transport is not None:
                self.state.hung.append(self.transport)
        else:
            self.state.counts[self.mode] += 1
        match = FIRST_ID.search(body)
        if match:
            self.state.arrivals.append((match.group(1).decode(), now))
        if mode == "hang":
            return
        if mode == "slow":
            asyncio.get_running_loop().call_later(self.delay, self._answer)
        else:
            self._answer()

    def _answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(ANSWER)


async def main() -> None:
    loop = asyncio.get_running_loop()
    state = State()
    servers: list[asyncio.base_events.Server] = []
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(answer: Any) -> None:
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.flush()

    say({"ready": True})
    while True:
        line = await reader.readline()
        if not line:
            break
        words = line.decode().split()
        if not words:
            continue
        command = words[0]
        if command == "listen":
            mode, count = words[1], int(words[2])
            delay = float(words[3]) if len(words) > 3 else 0.0
            ports = []
            for _ in range(count):
                server = await loop.create_server(
                    lambda mode=mode, delay=delay: SinkProtocol(state, mode, delay),
                    "127.0.0.1",
                    0,
                    backlog=4096,
                )
                servers.append(server)
                ports.append(server.sockets[0].getsockname()[1])
            say({"ports": ports})
        elif command == "stats":
            say({"count": sum(state.counts.values()), "by_mode": dict(state.counts)})
        elif command == "arrivals":
            arrivals, state.arrivals = state.arrivals, []
            say({"arrivals": arrivals})
        elif command == "reset":
            state.counts.clear()
            state.arrivals = []
            for transport in state.hung:
                transport.close()
            state.hung = []
            say({"ok": True})
        else:
            say({"error": f"unknown command {command!r}"})
    for server in servers:
        server.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
