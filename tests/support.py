"""Test support: a real HTTP sink, real service processes, and polling with a deadline."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, NoReturn, TypeVar

import httpx

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | Literal[False] | None], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll until ``predicate()`` is truthy and return that; fail the test with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def is_delivered(redis: Any, delivery_id: str) -> bool:
    """Whether the delivery is delivered: its record says so, or (named by its post) it has none left."""
    from svcgw import deliveryid
    from svcgw.storage.keys import PLAIN as keys

    if deliveryid.parse_named(delivery_id) is None:
        return bool(redis.hget(keys.delivery(delivery_id), "state") == b"delivered")
    return not redis.exists(keys.delivery(delivery_id), keys.rq.job(delivery_id))


def service_chain(redis: Any, appid: str) -> list[str]:
    """The instance's service-event chain as a liveness flip reads it before it queues one
    (svcgw.delivery.chainkeys)."""
    from svcgw.delivery import chainkeys
    from svcgw.storage.keys import PLAIN as keys

    return chainkeys.members(redis.lrange(keys.service_events(appid), 0, -1))


def attempt_records(redis: Any, delivery_id: str) -> list[dict[str, Any]]:
    """A delivery's attempt records, oldest first, decoded, wherever they are kept (svcgw.delivery.attemptrecords)."""
    import orjson

    from svcgw.delivery import attemptrecords
    from svcgw.storage.keys import PLAIN as keys

    stored = {name.decode(): value for name, value in redis.hgetall(keys.delivery(delivery_id)).items()}
    legacy = redis.lrange(keys.delivery_attempts(delivery_id), 0, -1)
    return [orjson.loads(record) for record in attemptrecords.from_hash(stored, legacy)]


def tools_required() -> bool:
    """Whether a test's missing tool fails it instead of skipping it (``.ci/run`` sets this when CI=true)."""
    return os.environ.get("SVCGW_TEST_REQUIRE_TOOLS", "") not in ("", "0")


def missing_tool(reason: str) -> NoReturn:
    """Skip the test for a tool that is not installed, or fail it where the tool must be (:func:`tools_required`)."""
    import pytest

    if tools_required():
        pytest.fail(f"{reason}; SVCGW_TEST_REQUIRE_TOOLS is set, so this is a failure, not a skip")
    pytest.skip(reason)


# Ports for servers the tests start: below Linux's ephemeral range (32768 on), which every outgoing
# connection of this machine draws from. Between the check here and the server's own bind, a port from that
# range can be taken (a flood's connections, another test's client), and the server then fails to start, or
# someone else's server answering /readyz there passes for ours.
_SERVER_PORTS = range(20000, 32768)


def _own_ports() -> range:
    """This test process's share of :data:`_SERVER_PORTS`: each xdist worker hands out ports of its own, so two
    workers never pick the same port between one's check and its server's bind."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    index = int((os.environ.get("PYTEST_XDIST_WORKER") or "gw0").removeprefix("gw") or 0) % max(count, 1)
    share = len(_SERVER_PORTS) // max(count, 1)
    start = _SERVER_PORTS.start + index * share
    return range(start, start + share)


_ports_lock = threading.Lock()
_next_port: list[int] = []  # the next port this process hands out, once known


def free_port() -> int:
    """A loopback port outside the ephemeral range that nothing listens on or holds now.

    Handed out in turn through this process's share, from a random start: a port given moments ago, whose
    server may not have bound it yet, comes round again only after the whole share.
    """
    own = _own_ports()
    with _ports_lock:
        if not _next_port:
            _next_port.append(random.randrange(len(own)))
        for _ in range(len(own)):
            port = own[_next_port[0] % len(own)]
            _next_port[0] += 1
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))  # without SO_REUSEADDR: held in any state is taken
                except OSError:
                    continue
                return port
    raise AssertionError("no free loopback port for a server")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    # When the sink began its answer: the sender held the request from before ``at`` until after this.
    answered: float | None = None


def most_in_flight(spans: Iterable[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) that overlap at one moment; one that ends as another starts does not."""
    edges = sorted(edge for start, end in spans for edge in ((start, 1), (end, -1)))
    most = now = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start (+1)
        now += step
        most = max(most, now)
    return most


def held_at_once(posts: Iterable[Received]) -> int:
    """The most of ``posts`` the sink held unanswered at one moment: a lower bound of the sender's own in flight."""
    return most_in_flight((post.at, post.answered) for post in posts if post.answered is not None)


class ListeningServer(ThreadingHTTPServer):
    # socketserver's default backlog is 5: a worker opening many connections at once would have its
    # SYNs dropped and retried after 1, 3, 7 s, stalling deliveries for reasons no service has.
    request_queue_size = 256


@dataclass
class Sink:
    """An HTTP server on loopback that records every POST and answers as told."""

    status: int = 200
    delay: float = 0.0
    location: str | None = None
    # When set, decides each answer (HTTP status, delay) from the post and the posts before it.
    rule: Callable[[Received, list[Received]], tuple[int, float]] | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Sink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                post = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time())
                with sink.lock:
                    earlier = list(sink.received)
                    sink.received.append(post)
                    status, delay, location = sink.status, sink.delay, sink.location
                    if sink.rule is not None:
                        status, delay = sink.rule(post, earlier)
                if delay:
                    time.sleep(delay)
                post.answered = time.time()
                payload = b'{"ok":true}'
                try:
                    self.send_response(status)
                    if location:
                        self.send_header("Location", location)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ListeningServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def set(self, *, status: int | None = None, delay: float | None = None, location: str | None = None) -> None:
        with self.lock:
            if status is not None:
                self.status = status
            if delay is not None:
                self.delay = delay
            self.location = location

    def posts(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Process:
    """A ``svcgw`` role run as a real child process."""

    def __init__(self, args: list[str], env: dict[str, str], name: str) -> None:
        self.args = args
        self.env = env
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(env.get("SVCGW_STATE_DIR", "."), f"{name}.log")

    def start(self) -> Process:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except FileNotFoundError:
            return ""

    def exit_status(self) -> str:
        """How it ended ("exit code 1", "killed by SIGKILL"), or "running"."""
        code = None if self.proc is None else self.proc.poll()
        if code is None:
            return "running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class UpDemo:
    """``svcgw up --demo`` as a child process on free ports of its own, and the environment it was given."""

    process: Process
    env: dict[str, str]
    port: int
    sim_port: int

    @property
    def sim(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    def wait_for_msg(self, timeout: float) -> list[dict[str, str]]:
        """The ``Msg`` callbacks of the demo's traffic at the simulator's sink, once there is one."""

        def msg_callbacks() -> list[dict[str, str]]:
            if not self.process.alive():
                raise AssertionError(f"up exited:\n{self.process.output()}")
            try:
                entries = httpx.get(f"{self.sim}/_sim/sink", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return []
            return [e for e in entries if json.loads(e["body"]).get("event_type") == "Msg"]

        return wait_for(msg_callbacks, timeout=timeout, interval=0.2, what="a Msg callback of the demo at the sink")


def start_up_demo(env: dict[str, str], **settings: str) -> UpDemo:
    """``svcgw up --demo`` with the test's ``env`` and ``settings``: its own Redis (embedded, unless ``settings``
    name one) and its own simulator as upstream, on free ports; the caller stops it."""
    port, sim_port = free_port(), free_port()
    up_env = {k: v for k, v in env.items() if k not in ("SVCGW_REDIS_URL", "SVCGW_UPSTREAM_URL")}
    up_env.update(
        SVCGW_PORT=str(port), SVCGW_SIM_PORT=str(sim_port), SVCGW_PUBLIC_URL=f"http://127.0.0.1:{port}", **settings
    )
    return UpDemo(Process(["up", "--demo"], up_env, "up").start(), up_env, port, sim_port)


def wait_answering(process: Process, url: str, what: str) -> None:
    """Wait until ``url`` answers 200; fail with the process's output if it exits first."""

    def ready() -> bool:
        if not process.alive():
            raise AssertionError(f"{what} exited ({process.exit_status()}):\n{process.output()}")
        try:
            return httpx.get(url, timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    # Generous: an interpreter starting on two cores shared with other work can take that long.
    wait_for(ready, timeout=40, interval=0.05, what=what)


def start_server(env: dict[str, str], name: str = "serve") -> tuple[Process, str]:
    """``svcgw serve`` on a free port (``SVCGW_PORT`` is set for it), once it is ready.

    A port taken between the check and the server's bind is met again on another port (three tries);
    ready means answering with this process alive and its log saying it listens there.
    """
    for _ in range(3):
        port = free_port()
        process = Process(["serve"], dict(env, SVCGW_PORT=str(port)), f"{name}-{port}").start()
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready_or_stop(process, base + "/readyz", "the HTTP server")
            if int(env.get("SVCGW_HTTP_WORKERS", "1")) == 1:  # uvicorn's workers say nothing of their sockets
                listening = functools.partial(_listening, process, port)
                wait_for(listening, 40, 0.05, f"the HTTP server's log of listening on {port}")
        except AssertionError:
            if "address already in use" in process.output().lower():
                process.stop()
                continue
            process.stop()
            raise
        return process, base
    raise AssertionError(f"the HTTP server found its port taken three times:\n{process.output()}")


def _listening(process: Process, port: int) -> bool:
    """Whether the server's log says it listens on ``port`` (and it is still running: the answer was its own)."""
    if not process.alive():
        raise AssertionError(f"the HTTP server exited ({process.exit_status()}):\n{process.output()}")
    output = process.output()
    return f"127.0.0.1:{port}" in output and "address already in use" not in output.lower()


def start_sim(state_dir: str) -> tuple[Process, str]:
    """The capability-layer simulator (``svcgw sim``) on a free port, once it answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    env.update(SVCGW_STATE_DIR=state_dir, PYTHONUNBUFFERED="1")
    process = Process(["sim", "--port", str(port)], env, "sim").start()
    base = f"http://127.0.0.1:{port}"
    wait_ready_or_stop(process, base + "/_sim/instances", "the simulator")
    return process, base


def wait_ready_or_stop(process: Process, url: str, what: str) -> None:
    """:func:`wait_answering`; a process that never answers is stopped, not left running after the test."""
    try:
        wait_answering(process, url, what)
    except BaseException:
        process.stop()
        raise


class LogCapture(logging.Handler):
    """Every log record of the test process while installed, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        with self._guard:
            self.lines.append(text)

    def output(self) -> str:
        with self._guard:
            return "\n".join(self.lines)


class ThreadedServer:
    """An ASGI app served by uvicorn on loopback, in a thread of the test process.

    The app runs in-process (its own event loop in the thread), yet is
    reached over real HTTP: raw request targets stay as written, and other
    servers (the simulator posting events) can call it back. ``output()``
    is what the process logged meanwhile, tracebacks included.
    """

    def __init__(self, app: Any, port: int | None = None) -> None:
        import uvicorn

        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, access_log=False, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"asgi-{self.port}", daemon=True)
        self.logs = LogCapture()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadedServer:
        logging.getLogger().addHandler(self.logs)
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise AssertionError(f"the server on port {self.port} exited:\n{self.logs.output()}")
            return bool(self.server.started)

        wait_for(started, timeout=20, interval=0.01, what=f"the server on port {self.port}")
        return self

    def output(self) -> str:
        return self.logs.output()

    def stop(self, timeout: float = 20.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        logging.getLogger().removeHandler(self.logs)


class ThreadedWorker:
    """The delivery worker (``worker.main``: the engine and the prober) on its own event loop, in a thread.

    The same code as ``svcgw worker``, without an interpreter started for it;
    :meth:`stop` sets the event that SIGTERM sets in the process. Tests about
    the process itself (kill -9, signals, restarts) start it with ``Process``.
    """

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="worker", daemon=True)
        self.logs = LogCapture()
        self._running = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        from worker.engine import loop_factory
        from worker.main import serve

        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                self._loop, self._stop = runner.get_loop(), asyncio.Event()
                self._running.set()
                runner.run(serve(self.settings, stop=self._stop))
        except BaseException as error:  # kept for stop() to report
            self.error = error
        finally:
            self._running.set()

    def start(self) -> ThreadedWorker:
        logging.getLogger().addHandler(self.logs)
        self.thread.start()
        self._running.wait(20)
        return self

    def alive(self) -> bool:
        return self.thread.is_alive()

    def output(self) -> str:
        return self.logs.output()

    def stop(self, timeout: float = 20.0) -> None:
        if self._loop is not None and self._stop is not None and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout)
        logging.getLogger().removeHandler(self.logs)
        if self.thread.is_alive():
            raise AssertionError(f"the worker did not stop within {timeout}s:\n{self.output()}")
        if self.error is not None:
            raise AssertionError(f"the worker failed: {self.error!r}\n{self.output()}") from self.error


def fake_resolver(table: Mapping[str, Sequence[str]]) -> Callable[[str, int], list[str]]:
    """A resolver for the address rules: ``table`` maps host names to addresses; others do not resolve."""

    def resolve(host: str, port: int) -> list[str]:
        try:
            return list(table[host])
        except KeyError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None

    return resolve
