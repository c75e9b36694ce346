"""Gateway load without wrk: ``python -m tests.bench.gateway_load SPEC.json``.

``connections`` clients post one fixed request back to back for
``duration`` seconds over keep-alive connections (raw HTTP/1.1 on uvloop
and httptools, a few microseconds per request) and write what they saw as
JSON to the spec's ``out`` path: requests per second, p50/p99 latency, and
the answers that were not HTTP 200 or whose envelope was not code 0 (a
gateway answers -50002 with HTTP 502, but a pass-through refusal is 200).
Used when wrk is not installed, and to check the answers' bytes.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httptools
import orjson


class Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(exc)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))

    async def send(self, data: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.body = []
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self.waiter


def request_bytes(host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    host, port = spec["host"], int(spec["port"])
    data = request_bytes(host, port, spec["path"], spec.get("headers", {}), spec["body"].encode())
    expected: bytes | None = spec["expect"].encode() if spec.get("expect") else None
    latencies: list[float] = []
    bad: dict[str, int] = {}
    stop_at = time.perf_counter() + float(spec["duration"])
    limit = int(spec.get("requests") or 10**12)
    sent = 0
    loop = asyncio.get_running_loop()

    async def client() -> None:
        nonlocal sent
        _, conn = await loop.create_connection(Client, host, port)
        try:
            while time.perf_counter() < stop_at and sent < limit:
                sent += 1
                started = time.perf_counter()
                status, body = await conn.send(data)
                latencies.append(time.perf_counter() - started)
                if status != 200 or (expected is not None and body != expected) or b'"code":0' not in body:
                    reason = f"{status} {body[:80].decode('utf-8', 'replace')}"
                    bad[reason] = bad.get(reason, 0) + 1
        finally:
            assert conn.transport is not None
            conn.transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(int(spec["connections"]))))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000, 3)

    return {
        "requests": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "bad": sum(bad.values()),
        "bad_examples": dict(list(bad.items())[:5]),
        "generator": "python",
    }


async def main(spec_path: str) -> None:
    with open(spec_path, "rb") as handle:
        spec = orjson.loads(handle.read())
    result = await run(spec)
    with open(spec["out"], "wb") as handle:
        handle.write(orjson.dumps(result))


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1]))
