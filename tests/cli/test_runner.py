"""The roles' processes (cli.runner): a worker's collector is settled before it delivers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Replaces the worker's delivery loop with a report of the collector as the loop would find it.
PROBE = """
import gc, sys
import worker.main
from cli import runner
worker.main.run = lambda settings, burst: print(gc.get_threshold()[0], gc.get_freeze_count())
runner.run_worker(None)
"""


def test_a_worker_process_freezes_its_loaded_code_and_raises_the_first_threshold() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    threshold, frozen = (int(word) for word in result.stdout.split())
    assert threshold == 10_000
    assert frozen > 10_000  # the modules and libraries a worker loads, out of the collector's sight
