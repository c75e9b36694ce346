"""The processes a benchmark run starts: its own Redis, the service roles, the sink, and their costs."""

from __future__ import annotations

import compileall
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from redis import Redis

from svcgw.storage import serverconfig
from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]


def compile_sources() -> None:
    """Compile the repository's own modules, and the installed ones its roles import, as ``pip install`` does.

    Every scenario starts its workers afresh. Without bytecode (``PYTHONDONTWRITEBYTECODE`` set,
    or a source tree never run) each start compiles every module again: about a second of CPU
    per process, which the run's first deliveries then share the two cores with. In the 200 ms
    scenario, whose 8,000 deliveries take two seconds, that was a third of the workers' CPU in
    its first four seconds. The same holds for the libraries when the environment was installed
    without bytecode (``uv pip install`` compiles nothing unless asked): importing a role took 2.5
    to 3.0 s of CPU on a slow machine, 1.2 s once they were compiled.
    The bytecode goes where Python looks for it, ``__pycache__`` (ignored by git); a module whose
    bytecode is up to date, or whose folder cannot be written, is left as it is.
    """
    for package in ("svcgw", "receiver", "worker", "cli", "simulator", "tests"):
        compileall.compile_dir(REPO / package, quiet=1)
    for path in _imported_libraries():
        compileall.compile_file(path, quiet=2)


# What ``svcgw serve`` and ``svcgw worker`` import, and so compile at each start without bytecode.
_ROLE_MODULES = (
    "cli.main", "cli.runner", "receiver.server.httpprotocol", "receiver.app", "worker.main", "worker.engine",
    "uvicorn.main",
)  # fmt: skip


@functools.cache
def _imported_libraries() -> tuple[str, ...]:
    """The source files the roles' modules import (found once per run; the repository's are compiled already)."""
    code = (f"import json, sys; import {', '.join(_ROLE_MODULES)}; "
            "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))")  # fmt: skip
    answer = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    if answer.returncode != 0:
        return ()
    files = orjson.loads(answer.stdout.strip().splitlines()[-1])
    return tuple(f for f in files if isinstance(f, str) and f.endswith(".py"))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A redis-server of the run's own on a free port, with an append-only file."""

    def __init__(self, directory: Path, appendfsync: str, *, appendonly: bool = True) -> None:
        self.dir = directory
        self.appendfsync = appendfsync
        self.appendonly = appendonly
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync, "--save", "",
             "--maxclients", "10000", "--loglevel", "warning", *serverconfig.server_args()],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = Redis.from_url(self.url, socket_connect_timeout=0.5)

        def up() -> bool:
            try:
                return bool(self.client.ping())
            except Exception:
                return False

        wait_until(up, 10, "redis-server to start")
        return self

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    @contextmanager
    def no_aof_rewrite(self) -> Iterator[None]:
        """Rewrite the append-only file now, then hold off Redis's own rewrites until the block ends.

        A rewrite forks Redis and takes most of a core for about half a second. It starts when
        the file has doubled, so it lands on whichever run of a pair happens to cross that line;
        on two cores that alone moved one pair's ratio from 0.96 to 0.72. Paired runs are timed
        inside this block, each from a freshly rewritten file.
        """
        if not self.appendonly:
            yield
            return

        def idle() -> bool:
            persistence = self.client.info("persistence")
            return not (int(persistence["aof_rewrite_in_progress"]) or int(persistence["aof_rewrite_scheduled"]))

        wait_until(idle, 120, "an append-only file rewrite to end")
        self.client.bgrewriteaof()
        wait_until(idle, 120, "the append-only file rewrite to end")
        previous = self.client.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"]
        self.client.config_set("auto-aof-rewrite-percentage", 0)
        try:
            yield
        finally:
            self.client.config_set("auto-aof-rewrite-percentage", previous)

    def commands(self) -> int:
        """Commands executed so far, those run by scripts included."""
        stats = self.client.info("commandstats")
        return sum(int(v["calls"]) for v in stats.values())

    def command_counts(self) -> dict[str, int]:
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in self.client.info("commandstats").items()}

    def cpu_seconds(self) -> float:
        """CPU time the server has used so far, by its own account (its rewrite children's not included)."""
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Role:
    """``svcgw serve`` or ``svcgw worker`` as a child process, in a session of its own."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Role:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", *self.args],
                env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM) without waiting for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 15.0, *, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if kill:
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def cpu_seconds(self) -> float:
        """CPU time (user and system) used so far by the process and its live descendants."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        return cpu_seconds(_tree(self.proc.pid))

    def rss_bytes(self) -> int:
        """Resident memory of the process and all its descendants (uvicorn's workers)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        return sum(_rss(pid) for pid in _tree(self.proc.pid))


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used so far (those gone count 0)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def start_server(env: dict[str, str], log: Path) -> tuple[Role, str]:
    port = free_port()
    role = Role(["serve"], dict(env, SVCGW_PORT=str(port)), log).start()
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not role.alive():
            raise RuntimeError(f"svcgw serve exited; see {log}")
        try:
            return httpx.get(base + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, 30, "the HTTP server")
    wait_for_listeners(role, port, int(env.get("SVCGW_HTTP_WORKERS", "1")))
    return role, base


def wait_for_listeners(role: Role, port: int, workers: int) -> None:
    """Wait until ``workers`` processes of ``role`` listen on ``port``.

    ``/readyz`` answers once one HTTP worker is up. Each worker listens on a socket of its own
    (``SO_REUSEPORT``: receiver.server.listeners), and a load generator keeps the connections it opens first:
    opened while one worker alone listens, all of them go to it, and the run measures one process
    of the two (seen: 0.48 s of CPU in one worker against 6.42 in the other, 4,900 posts/s against
    6,100 with both).
    """

    def listening() -> bool:
        assert role.proc is not None
        return listeners(_tree(role.proc.pid), port) >= workers

    wait_until(listening, 30, f"{workers} HTTP workers listening on port {port}")


def listeners(pids: list[int], port: int) -> int:
    """How many of ``pids`` hold a listening TCP socket on ``port`` (/proc/net/tcp and tcp6)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "HEX_IP:HEX_PORT", state 0A is LISTEN, the socket's inode in column 10
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    count = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or not ours to read
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass  # closed since it was listed (the listing's own, for one)
        count += bool(links & inodes)
    return count


class Sink:
    """The sink process (``tests/bench/sink.py``), driven over its stdin."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.sink"], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self._read()

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the sink exited")
        return orjson.loads(line)

    def command(self, text: str) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()
        return self._read()

    def listen(self, mode: str, count: int, delay: float = 0.0) -> list[int]:
        return list(self.command(f"listen {mode} {count} {delay}")["ports"])

    def count(self, mode: str | None = None) -> int:
        """Requests received so far (of the ports in ``mode`` only, if given)."""
        stats = self.command("stats")
        return int(stats["count"] if mode is None else stats["by_mode"].get(mode, 0))

    def arrivals(self) -> list[tuple[str, float]]:
        return [(str(i), float(t)) for i, t in self.command("arrivals")["arrivals"]]

    def reset(self) -> None:
        self.command("reset")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def wrk_path() -> str | None:
    return shutil.which("wrk")
