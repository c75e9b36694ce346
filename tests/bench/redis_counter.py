"""A TCP proxy in front of Redis that counts the commands its clients send.

``INFO commandstats`` counts the commands a Lua script runs as well as the
script itself, so it says how much work Redis does, not how many times a
client waited for it. The proxy counts what crosses the wire: every
top-level command a client sends (an ``EVALSHA`` is one, whatever the
script does), parsed with hiredis's RESP reader. With no pipelining on the
path measured, commands sent are round trips. It runs on its own event
loop in a thread of the benchmark's process.
"""

from __future__ import annotations

import asyncio
import threading

import hiredis

from tests.support import free_port

__all__ = ["CountingProxy"]


class CountingProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.commands = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-counter", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> CountingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the counting proxy did not start")
        return self

    def count(self) -> int:
        with self._lock:
            return self.commands

    def stop(self) -> None:
        """Close every connection, both sides, and the listening socket; then end the thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in list(self._writers):
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.add(upstream_writer)

        async def requests() -> None:
            parser = hiredis.Reader()
            while data := await reader.read(65536):
                parser.feed(data)
                sent = 0
                while parser.gets() is not False:
                    sent += 1
                with self._lock:
                    self.commands += sent
                upstream_writer.write(data)
                await upstream_writer.drain()
            upstream_writer.close()

        async def replies() -> None:
            while data := await upstream_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(requests(), replies())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            upstream_writer.close()
            self._tasks.discard(task)
