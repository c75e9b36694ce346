"""Loopback ports of the children ``svcgw up`` starts: free ones, and the one a state dir kept.

The embedded Redis (``cli.embedded``) and the demo's simulator
(``cli.demosim``) keep their port in the state dir, so the addresses printed
for it keep working across restarts, and take another while something else
holds it.
"""

from __future__ import annotations

import socket
from pathlib import Path

__all__ = ["free_port", "kept_port", "port_is_free"]


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a server could bind ``port`` of 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers bind: connections of a last run still in TIME_WAIT do not hold the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def kept_port(path: Path) -> int | None:
    """The port written in ``path``; None when there is none, or no port."""
    try:
        port = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None
