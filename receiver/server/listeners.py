"""A listening socket per server process (``SVCGW_HTTP_WORKERS`` > 1).

uvicorn's supervisor binds one socket and hands it to every worker process.
All of them then wait on the same accept queue, and whichever process the
kernel wakes first takes every connection waiting there: a client that opens
its connections at once (a pool, a load balancer) lands them mostly on one
process, and the others idle. Measured with 50 connections and two workers:
7,600 calls/s in two rounds of three, 10,200 in the one where the
connections happened to split, against 7,000 with a single worker.

Here each worker binds its own socket to the same address with
``SO_REUSEPORT``, and the kernel spreads new connections across the
listening sockets by a hash of their addresses, evenly. The supervisor
(uvicorn's ``Multiprocess``: health checks, restarts, signals) is unchanged;
it only starts :class:`OwnSocketProcess` instead of its own ``Process``.

uvicorn (0.54.0, as pinned) has no option for this: no ``SO_REUSEPORT``,
and ``Multiprocess`` takes no worker class, naming its module's ``Process``
wherever it starts one. So :func:`run_supervised` sets that name, the one
reach into uvicorn here; ``tests/receiver/server/test_listeners.py`` pins
that the supervisor makes every worker through it, and how.
"""

from __future__ import annotations

import logging
import socket
import sys

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors import multiprocess

__all__ = ["OwnSocketProcess", "check_port", "reuse_port_socket", "run_supervised"]

log = logging.getLogger("svcgw")


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` that other processes of this user may bind too (not yet listening)."""
    return _bind(host, port, share=True)


def check_port(host: str, port: int) -> None:
    """Fail before any worker starts when something listens on the address already.

    The check binds without ``SO_REUSEPORT``, so it fails against every
    listener, another ``svcgw serve``'s workers included: two servers
    started on one port would otherwise share its connections silently.
    """
    _bind_or_exit(host, port, share=False).close()


class OwnSocketProcess(multiprocess.Process):
    """A worker process of uvicorn's supervisor that listens on a socket of its own."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover - child process
        super().target([_bind_or_exit(self.config.host, self.config.port, share=True)])


def _bind(host: str, port: int, *, share: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _bind_or_exit(host: str, port: int, *, share: bool) -> socket.socket:
    # uvicorn's supervisor stops, instead of restarting the worker, on this exit code.
    try:
        return _bind(host, port, share=share)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        sys.exit(STARTUP_FAILURE)


def run_supervised(config: Config) -> None:
    """Run ``config.workers`` server processes under uvicorn's supervisor, each with its own socket."""
    check_port(config.host, config.port)
    # The supervisor names its worker class at module level, in every place it starts one
    # (start, restart after a death, restart_all); this parent process only supervises.
    multiprocess.Process = OwnSocketProcess  # type: ignore[misc]
    multiprocess.Multiprocess(config, sockets=[]).run()
