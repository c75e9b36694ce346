"""One worker process, several shards: an engine that fails is started again, and the others never stop."""

from __future__ import annotations

import asyncio
from typing import Any

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
