"""The demo's simulator: its port (SVCGW_SIM_PORT, or one of its own), and ``up --demo`` when it cannot run."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli import demosim
from tests.support import Process, free_port, wait_for


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_a_taken_sim_port_that_was_set_is_refused_naming_the_variable(taken: int, tmp_path: Path) -> None:
    with pytest.raises(demosim.SimulatorError, match=rf"SVCGW_SIM_PORT={taken}: the port is in use"):
        demosim.choose_port({"SVCGW_SIM_PORT": str(taken)}, tmp_path)
    for bad in ("http", "0", "70000", "-1"):
        with pytest.raises(demosim.SimulatorError, match="SVCGW_SIM_PORT must be a port number"):
            demosim.choose_port({"SVCGW_SIM_PORT": bad}, tmp_path)
    port = free_port()
    assert demosim.choose_port({"SVCGW_SIM_PORT": str(port)}, tmp_path) == port
    assert not (tmp_path / "sim").exists()  # the operator's choice is not kept for them


def test_unset_it_keeps_its_port_and_takes_another_while_that_one_is_taken(
    taken: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "sim" / "port"
    kept.parent.mkdir()
    kept.write_text(f"{taken}\n")
    with caplog.at_level(logging.WARNING, logger="svcgw"):
        chosen = demosim.choose_port({}, tmp_path)
    assert chosen != taken and kept.read_text().strip() == str(chosen)
    assert f"port {taken} is in use by another process; using {chosen}" in caplog.text
    assert demosim.choose_port({"SVCGW_SIM_PORT": " "}, tmp_path) == chosen  # blank is unset; kept across starts


def test_unset_and_nothing_kept_it_is_the_default_while_free(
    taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert demosim.DEFAULT_PORT == 8090
    free = free_port()
    monkeypatch.setattr(demosim, "DEFAULT_PORT", free)
    assert demosim.choose_port({}, tmp_path / "a") == free
    monkeypatch.setattr(demosim, "DEFAULT_PORT", taken)
    chosen = demosim.choose_port({}, tmp_path / "b")
    assert chosen != taken and (tmp_path / "b" / "sim" / "port").read_text().strip() == str(chosen)


def test_a_simulator_that_exits_at_start_is_reported_at_once(tmp_path: Path) -> None:
    def spawn(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sh", "-c", "exit 3"])

    started = time.monotonic()
    with pytest.raises(demosim.SimulatorError, match=r"exited at start with status 3 \(port \d+\)"):
        demosim.start({}, tmp_path, spawn)
    assert time.monotonic() - started < 10


def _up_env(env: dict[str, str], **extra: str) -> dict[str, str]:
    up_env = {k: v for k, v in env.items() if k not in ("SVCGW_REDIS_URL", "SVCGW_UPSTREAM_URL", "SVCGW_PUBLIC_URL")}
    return dict(up_env, SVCGW_PORT=str(free_port()), **extra)


def _redis_left(state_dir: str) -> bool:
    """Whether the embedded Redis of this state dir still answers."""
    port_file = Path(state_dir) / "redis" / "port"
    if not port_file.exists():
        return False
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", int(port_file.read_text()))) == 0


@pytest.mark.slow
def test_up_demo_stops_at_once_when_the_sim_port_it_was_given_is_taken(env: dict[str, str], taken: int) -> None:
    up_env = _up_env(env, SVCGW_SIM_PORT=str(taken))
    up = Process(["up", "--demo"], up_env, "up-taken").start()
    try:
        assert up.proc is not None
        status = up.proc.wait(30)
    finally:
        up.stop()
    output = up.output()
    assert status != 0, output
    assert f"SVCGW_SIM_PORT={taken}: the port is in use" in output
    assert "svcgw is up" not in output and "could not prepare the demo data" not in output
    assert not _redis_left(up_env["SVCGW_STATE_DIR"]), "the embedded Redis was left running"


@pytest.mark.slow
def test_up_demo_takes_a_free_sim_port_and_exits_non_zero_when_a_role_dies(
    env: dict[str, str], taken: int
) -> None:
    up_env = _up_env(env)
    kept = Path(up_env["SVCGW_STATE_DIR"]) / "sim" / "port"
    kept.parent.mkdir(parents=True)
    kept.write_text(f"{taken}\n")  # the port of its last start, taken since
    up = Process(["up", "--demo"], up_env, "up-free").start()
    try:

        def walked_through() -> str | None:
            if not up.alive():
                raise AssertionError(f"up exited:\n{up.output()}")
            text = up.output()
            return text if "svcgw is up" in text else None

        output = wait_for(walked_through, timeout=90, interval=0.2, what="svcgw up --demo")
        sim_port = int(kept.read_text())
        assert sim_port != taken
        assert f"port {taken} is in use by another process; using {sim_port}" in output
        assert f"http://127.0.0.1:{sim_port}/_sim/sink" in output and "could not prepare" not in output
        assert httpx.get(f"http://127.0.0.1:{sim_port}/_sim/config", timeout=5).status_code == 200

        # A role that stops by itself stops everything, and up says so with its exit status.
        assert up.proc is not None
        listed = subprocess.run(
            ["ps", "-o", "pid=,args=", "--ppid", str(up.proc.pid)], capture_output=True, text=True, check=True
        ).stdout
        (sim_pid,) = [int(line.split()[0]) for line in listed.splitlines() if re.search(r"-m cli sim\b", line)]
        os.kill(sim_pid, signal.SIGKILL)
        status = up.proc.wait(60)
    finally:
        up.stop()
    assert status == 1, up.output()
    assert "sim exited with -9; stopping everything" in up.output()
    assert not _redis_left(up_env["SVCGW_STATE_DIR"])


@pytest.mark.slow
def test_up_demo_stops_without_waiting_out_readiness_when_the_http_port_is_taken(
    env: dict[str, str], taken: int
) -> None:
    up_env = dict(_up_env(env), SVCGW_PORT=str(taken), SVCGW_HOST="127.0.0.1")
    up = Process(["up", "--demo"], up_env, "up-http-taken").start()
    try:
        assert up.proc is not None
        status = up.proc.wait(45)  # the readiness deadline alone is 60 s
    finally:
        up.stop()
    output = up.output()
    assert status != 0, output
    assert "the HTTP server exited before it answered" in output, output
    assert "svcgw is up" not in output and "Monitoring: rq-dashboard" not in output
    assert not _redis_left(up_env["SVCGW_STATE_DIR"]), "the embedded Redis was left running"
