"""SIGTERM under load: the server finishes what it started and takes nothing new; a worker stops in bounded time.

This is what a rolling upgrade does to each process; nothing acknowledged
may be lost on the way.
"""

from __future__ import annotations

import signal
import socket
import time
from urllib.parse import urlsplit

import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.deploy.load import Load, event_ids, missing
from tests.support import Process, Sink, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


def refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


def test_sigterm_to_the_server_finishes_in_flight_requests_and_refuses_new_ones(
    env: dict[str, str], settings: Settings, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url)
    server, base = start_server(env)
    worker: Process | None = None
    replacement: Process | None = None
    parts = urlsplit(tenant.receiver_url(base))
    host, port = parts.hostname or "", parts.port or 80
    body = b'{"event_type":"Msg","events":[{"id":"in-flight"}]}'
    try:
        with Load([tenant.receiver_url(base)], prefix="old") as load:
            wait_for(lambda: load.acked() >= 200, timeout=20, what="load to build up")
            # A request the server has begun: headers and half the body are in.
            slow = socket.create_connection((host, port), timeout=15)
            slow.sendall(
                f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:20]
            )
            time.sleep(0.3)
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: refused(host, port), timeout=5, what="new connections to be refused")
            slow.sendall(body[20:])
            answer = b""
            while chunk := slow.recv(65536):  # the server closes the connection after answering
                answer += chunk
            slow.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer
            assert b'"accepted":1' in answer
            # uvicorn exits by re-raising the signal it handled, once it has shut down cleanly.
            assert server.proc.wait(timeout=15) in (0, -signal.SIGTERM)
        assert load.refusals() > 0  # posts after SIGTERM were not taken

        replacement, base = start_server(env)
        worker = Process(["worker"], env, "worker").start()
        with Load([tenant.receiver_url(base)], prefix="new", limit=100) as more:
            wait_for(lambda: more.acked() >= 100, timeout=20, what="the new server to acknowledge posts")
        acknowledged = [*load.acknowledged, "in-flight", *more.acknowledged]
        wait_for(missing(acknowledged, lambda: event_ids(sink.posts())), timeout=30, interval=0.1,
                 what=f"all {len(acknowledged)} acknowledged events to be delivered")  # fmt: skip
    finally:
        for process in (worker, replacement, server):
            if process is not None:
                process.stop()


def test_sigterm_to_a_worker_finishes_or_hands_back_within_the_delivery_timeout(
    env: dict[str, str], settings: Settings, sink: Sink, redis: Redis
) -> None:
    timeout = settings.delivery_timeout
    sink.set(delay=timeout / 2)  # every delivery is in flight for a while
    tenant = provision(settings, url=sink.url)
    server, base = start_server(env)
    first = Process(["worker"], env, "worker-1").start()
    second: Process | None = None
    try:
        with Load([tenant.receiver_url(base)], prefix="ev", limit=3000, duration=60) as load:
            wait_for(lambda: len(sink.posts()) >= 10, timeout=20, what="deliveries in flight")
            assert first.proc is not None
            stopping = time.monotonic()
            first.proc.send_signal(signal.SIGTERM)
            code = first.proc.wait(timeout=timeout + 10)
            stopped_in = time.monotonic() - stopping
            # Nothing is left claimed by the stopped worker: no delivery waits for a lease to run out.
            assert redis.zcard(keys.inflight(settings.queue_name)) == 0
            sink.set(delay=0)
            second = Process(["worker"], env, "worker-2").start()
            wait_for(lambda: load.acked() >= 300, timeout=30, what="more posts")
        print(f"worker stopped {stopped_in:.2f}s after SIGTERM (delivery timeout {timeout}s)")
        assert code == 0 and stopped_in <= timeout + 3
        wait_for(missing(load.acknowledged, lambda: event_ids(sink.posts())), timeout=30, interval=0.1,
                 what=f"all {len(load.acknowledged)} acknowledged events to be delivered")  # fmt: skip
    finally:
        for process in (second, first, server):
            if process is not None:
                process.stop()
