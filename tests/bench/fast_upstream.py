"""``python -m tests.bench.fast_upstream PORT``: the least a capability layer can be, for throughput.

A raw HTTP/1.1 server on uvloop and httptools that answers every request,
keep-alive, with one fixed ``user/getProfile`` envelope (a 19-digit
integer in it). It reads nothing of the request but its end: what it costs
per call is the least any upstream can cost, so a gateway measured in
front of it is measured, not the upstream. The simulator stays the
upstream of the fidelity figures. It prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import sys

import httptools

BODY = (
    b'{"code":0,"message":"ok","time":"2026-01-01 00:00:00","data":{"appid":"we_benchgateway01",'
    b'"uin":1688850000000000123,"nickname":"bench","avatar":"","gender":0}}'
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


class Answering(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(ANSWER)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Answering, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(int(sys.argv[1])))
