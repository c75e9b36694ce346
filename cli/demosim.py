"""The capability-layer simulator that ``svcgw up --demo`` runs: its port, and its start.

``SVCGW_SIM_PORT`` set, that port is the simulator's, and one that is taken
stops ``up`` at once, with a message that names the variable: the operator
chose it, and the demo's printed addresses would be wrong on any other.
Unset, the port is chosen as the embedded Redis's is (``cli.ports``):
the one of the last start of this state dir (``SVCGW_STATE_DIR/sim/port``),
else 8090, while free; otherwise a free one, kept for the next start and
logged.

:func:`start` then waits until the simulator answers, so that one that dies
at start (a port taken between the check and its bind) stops ``up`` at
once instead of the demo waiting on a gateway whose upstream is gone.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import click
import httpx

from .ports import free_port, kept_port, port_is_free

__all__ = ["DEFAULT_PORT", "VARIABLE", "SimulatorError", "choose_port", "start"]

log = logging.getLogger("svcgw")

VARIABLE = "SVCGW_SIM_PORT"
DEFAULT_PORT = 8090
# An interpreter starting on two cores shared with other work can take this long.
START_TIMEOUT = 60.0


class SimulatorError(click.ClickException):
    """The demo's simulator cannot run: its port is taken or invalid, or it exited at start."""


def choose_port(env: Mapping[str, str], state_dir: Path) -> int:
    """The simulator's port: ``SVCGW_SIM_PORT``'s (free, or :class:`SimulatorError`), else as the module says."""
    value = env.get(VARIABLE, "").strip()
    if value:
        if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 65536:
            raise SimulatorError(f"{VARIABLE} must be a port number from 1 to 65535, got {value!r}")
        port = int(value)
        if not port_is_free(port):
            raise SimulatorError(
                f"{VARIABLE}={port}: the port is in use by another process on 127.0.0.1; free it, "
                f"or set {VARIABLE} to a free port (unset, svcgw up --demo takes a free one itself)"
            )
        return port
    directory = state_dir / "sim"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "port"
    kept = kept_port(path)
    wanted = kept if kept is not None else DEFAULT_PORT
    port = wanted if port_is_free(wanted) else free_port()
    if port != wanted:
        log.warning(
            "simulator: port %d is in use by another process; using %d from now on (%s chooses one)",
            wanted,
            port,
            VARIABLE,
        )
    if port != kept:
        path.write_text(f"{port}\n", encoding="utf-8")
    return port


def start(
    env: Mapping[str, str], state_dir: Path, spawn: Callable[[int], subprocess.Popen[bytes]]
) -> tuple[int, subprocess.Popen[bytes]]:
    """Choose the port, ``spawn(port)`` the simulator, and wait until it answers; its port and process.

    Raises :class:`SimulatorError` (the process stopped) when it exits or does not answer in time.
    """
    port = choose_port(env, state_dir)
    child = spawn(port)
    named = f"{VARIABLE}={port}" if env.get(VARIABLE, "").strip() else f"port {port}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        status = child.poll()
        if status is not None:
            raise SimulatorError(f"the simulator exited at start with status {status} ({named}); see its output above")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_sim/config", timeout=1, trust_env=False).status_code == 200:
                return port, child
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise SimulatorError(f"the simulator did not answer within {START_TIMEOUT:.0f}s ({named})")
        time.sleep(0.1)
