"""Load generators for the benchmark: a raw HTTP/1.1 client on uvloop and httptools.

Run as ``python -m tests.bench.loadgen SPEC.json``; it writes its result as
JSON to ``SPEC.json``'s ``out`` path. Two modes:

* ``rate``: open loop. Request *i* is due at ``start + i / rate``
  whatever happened to the earlier ones, and its latency is counted from that
  moment, so a slow server cannot hide its queueing (no coordinated omission);
* ``closed``: ``connections`` clients post back to back for ``duration``
  seconds (saturation, when wrk is not installed).

Every request posts one event with a unique id to one of the receiver
``paths``, round robin; ``sent`` maps each id to the time it was due (for
ingest-to-delivery latency). The client parses answers with httptools and
keeps connections alive: at a few microseconds per request it is not what
limits the measurement.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson


@dataclass
class Result:
    ok: int = 0
    failed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    sent: dict[str, float] = field(default_factory=dict)


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[int] | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(exc)

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(self.parser.get_status_code())

    async def request(self, data: bytes) -> int:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self.waiter


def request_bytes(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def event_body(event_id: str) -> bytes:
    return b'{"event_type":"Msg","events":[{"id":"' + event_id.encode() + b'","roomId":1688850000000000123}]}'


class Pool:
    def __init__(self, host: str, port: int, size: int) -> None:
        self.host = host
        self.port = port
        self.size = size
        self.opened = 0
        self.idle: asyncio.Queue[Connection] = asyncio.Queue()

    async def get(self) -> Connection:
        if self.idle.empty() and self.opened < self.size:
            self.opened += 1
            try:
                _, conn = await asyncio.get_running_loop().create_connection(Connection, self.host, self.port)
            except OSError:
                self.opened -= 1
                raise
            return conn
        return await self.idle.get()

    def put(self, conn: Connection) -> None:
        if conn.closed.done():
            self.opened -= 1
        else:
            self.idle.put_nowait(conn)


async def _one(pool: Pool, result: Result, path: str, event_id: str, due: float, record: bool) -> None:
    data = request_bytes(pool.host, pool.port, path, event_body(event_id))
    try:
        conn = await pool.get()
    except OSError:
        result.failed += 1
        return
    try:
        status = await conn.request(data)
    except (ConnectionError, httptools.HttpParserError):
        result.failed += 1
        pool.opened -= 1
        return
    pool.put(conn)
    result.statuses[str(status)] = result.statuses.get(str(status), 0) + 1
    if status == 200:
        result.ok += 1
        result.latencies.append(time.time() - due)
        if record:
            result.sent[event_id] = due
    else:
        result.failed += 1


async def open_loop(spec: dict[str, Any]) -> Result:
    pool = Pool(spec["host"], spec["port"], spec.get("connections", 256))
    paths: list[str] = spec["paths"]
    rate: float = spec["rate"]
    total = int(rate * spec["duration"])
    prefix: str = spec["prefix"]
    record = bool(spec.get("record", False))
    result = Result()
    tasks: set[asyncio.Task[None]] = set()
    start = time.time() + 0.05
    for i in range(total):
        due = start + i / rate
        delay = due - time.time()
        if delay > 0.001:
            await asyncio.sleep(delay)
        task = asyncio.create_task(_one(pool, result, paths[i % len(paths)], f"{prefix}{i}", due, record))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    return result


async def closed_loop(spec: dict[str, Any]) -> Result:
    connections: int = spec.get("connections", 64)
    pool = Pool(spec["host"], spec["port"], connections)
    paths: list[str] = spec["paths"]
    prefix: str = spec["prefix"]
    result = Result()
    stop_at = time.time() + spec["duration"]
    counter = iter(range(10**9))

    async def client() -> None:
        while time.time() < stop_at:
            n = next(counter)
            await _one(pool, result, paths[n % len(paths)], f"{prefix}{n}", time.time(), False)

    await asyncio.gather(*(client() for _ in range(connections)))
    return result


def summary(result: Result, elapsed: float) -> dict[str, Any]:
    latencies = sorted(result.latencies)

    def pct(p: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000, 2)

    return {
        "ok": result.ok,
        "failed": result.failed,
        "statuses": result.statuses,
        "elapsed": round(elapsed, 3),
        "ok_per_s": round(result.ok / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": pct(100),
        "sent": result.sent,
    }


async def main(spec_path: str) -> None:
    with open(spec_path, "rb") as handle:
        spec = orjson.loads(handle.read())
    started = time.time()
    result = await (open_loop(spec) if spec["mode"] == "rate" else closed_loop(spec))
    elapsed = time.time() - started
    with open(spec["out"], "wb") as handle:
        handle.write(orjson.dumps(summary(result, elapsed)))


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1]))
