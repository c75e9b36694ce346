"""``.ci/timed``: the suite stopped at its time limit still names the tests that failed before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMED = ROOT / ".ci" / "timed"

pytestmark = pytest.mark.slow

# A suite whose quick tests, two failing, end long before its slow ones.
SUITE = """
import time

import pytest


@pytest.mark.parametrize("n", range(12))
def test_quick(n):
    assert n % 5 != 3


@pytest.mark.parametrize("n", range(4))
def test_slow(n):
    time.sleep(300)
"""


def test_pytest_stopped_at_the_limit_prints_what_failed(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    limit = 40  # the quick tests end within seconds; xdist starting two processes on loaded cores took over 20
    command = [str(TIMED), str(limit), sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "test_suite.py"], cwd=tmp_path, capture_output=True, text=True, timeout=limit + 90,
        stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "CI_KILL_AFTER": "30"},
    )  # fmt: skip
    assert done.returncode == 124, (done.stdout, done.stderr)
    assert "FAILED test_suite.py::test_quick[3]" in done.stdout, done.stdout
    assert "FAILED test_suite.py::test_quick[8]" in done.stdout
    assert "2 failed, 10 passed" in done.stdout
    assert f"reached its time limit of {limit}s and was stopped (SIGINT)" in done.stderr


def test_a_command_within_its_limit_keeps_its_own_status(tmp_path: Path) -> None:
    assert subprocess.run([str(TIMED), "10", "sh", "-c", "exit 3"], timeout=30).returncode == 3
    assert subprocess.run([str(TIMED), "10", "true"], timeout=30).returncode == 0
    usage = subprocess.run([str(TIMED), "10"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_ci_run_stops_its_pytest_with_timed() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    (line,) = [line for line in script.splitlines() if '"$VENV/bin/python" -m pytest' in line]
    assert line.startswith('.ci/timed "$PYTEST_LIMIT" ') and "timeout" not in line
