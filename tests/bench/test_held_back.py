"""The held-back benchmark, small: each way claims every job, and the pop reads none of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.bench.held_back import run
from tests.bench.services import RedisServer


def test_the_pop_claims_every_job_of_a_busy_account_without_reading_it(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "everysec", appendonly=False).start()
    try:
        figures = asyncio.run(run(server.url, 300, 2))
    finally:
        server.stop()
    assert all(each["jobs"] == 300 for way in ("read", "pop") for each in figures["each"][way])
    # The read sets each job's status and moves its id (three commands and more); the pop, one ZADD per claim.
    assert figures["read"]["commands_per_job"] > 3
    assert figures["pop"]["commands_per_job"] < 0.05
