"""One worker process, several shards: an engine that fails is started again, the others never stop, and
each shard's lines say which it is."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from svcgw.config.settings import Settings
from svcgw.logs import JsonFormatter, TextFormatter
from tests.deploy.redis_fleet import RedisFleet
from tests.support import ThreadedWorker, wait_for
from worker import main


class Failing:
    """An engine whose first ``serve`` ends on an error, as one whose shard failed in its shutdown."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.served = 0

    async def serve(self, stop: asyncio.Event, *, burst: bool = False) -> None:
        self.served += 1
        if self.served <= self.failures:
            raise ConnectionError("shard gone")
        await stop.wait()


def test_an_engine_that_ends_on_an_error_is_started_again_and_the_others_go_on() -> None:
    async def scenario() -> tuple[int, int]:
        stop = asyncio.Event()
        broken, fine = Failing(2), Failing(0)
        engines: list[Any] = [fine, broken]
        tasks = [asyncio.create_task(main._deliver(e, i, stop, False)) for i, e in enumerate(engines)]
        for _ in range(200):  # a poll with a deadline: the restarts wait 0.2 s, then 0.4 s
            if broken.served == 3:
                break
            await asyncio.sleep(0.01)
        assert not any(task.done() for task in tasks)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return fine.served, broken.served

    assert asyncio.run(scenario()) == (1, 3)


STARTS = ("registered as RQ worker", "prober started", r"delivery engine \S+ started")


def shards(caplog: pytest.LogCaptureFixture, start: str) -> list[int | None]:
    """The ``shard`` of each record whose message starts so, in order (None: a record without one)."""
    found: list[int | None] = [getattr(r, "shard", None) for r in caplog.records if re.match(start, r.getMessage())]
    return sorted(found, key=lambda shard: -1 if shard is None else shard)


@pytest.mark.slow
def test_each_shards_start_up_lines_name_their_shard(
    env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The lines come once per shard; a JSON line carries ``shard``, a readable one ``shard=N``."""
    caplog.set_level(logging.INFO)
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    with RedisFleet(tmp_path / "fleet", 2).start() as fleet:
        settings = Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": fleet.setting})
        worker = ThreadedWorker(settings).start()
        try:
            wait_for(lambda: all(len(shards(caplog, s)) >= 2 for s in STARTS), timeout=20, what="both shards' starts")
        finally:
            worker.stop()
    for start in STARTS:
        assert shards(caplog, start)[:2] == [0, 1], start
    started = next(
        r for r in caplog.records if re.match(STARTS[2], r.getMessage()) and getattr(r, "shard", None) == 1
    )
    assert '"shard":1' in JsonFormatter().format(started) and TextFormatter().format(started).endswith("shard=1")


def test_one_shards_lines_are_as_before(env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    worker = ThreadedWorker(Settings.from_env(env)).start()
    try:
        wait_for(lambda: all(shards(caplog, s) for s in STARTS), timeout=20, what="the worker's start")
    finally:
        worker.stop()
    assert all(shards(caplog, start)[:1] == [None] for start in STARTS)
