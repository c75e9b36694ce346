"""The task that stores attempts' outcomes: whatever a call raises, it tries the batch again rather than end.

The queue is a stand-in whose first call raises what redis-py's Cluster client raised for a command
cut off by a node's reset; the task ending there left every later attempt of the engine waiting for
ever, its delivery leased and never finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from svcgw.config.settings import Settings
from worker.outcomes import Outcomes
from worker.queue import DeliveryQueue, Finish, Finished


class FailsFirst:
    """A queue whose first ``finish_detailed`` raises ``error``; the later ones store every item."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls: list[list[str]] = []

    async def finish_detailed(self, items: Sequence[Finish]) -> list[Finished]:
        self.calls.append([item.delivery_id for item in items])
        if len(self.calls) == 1:
            raise self.error
        return [Finished(held=True) for _ in items]


@pytest.mark.parametrize("error", [AttributeError("'NoneType' object has no attribute 'writelines'"), KeyError("x")])
def test_an_unexpected_error_while_storing_is_retried_not_the_end_of_the_task(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    queue = FailsFirst(error)

    async def main() -> tuple[Finished, bool, bool]:
        outcomes = Outcomes(Settings(), queue, None)
        task = asyncio.create_task(outcomes.run())
        try:
            stored = await asyncio.wait_for(outcomes.finish(Finish("d1", "we_a", "drop")), timeout=10)
            return stored, task.done(), outcomes.stalled(time.monotonic(), 60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    stored, ended, stalled = asyncio.run(main())
    assert stored.held and not ended and not stalled
    assert queue.calls == [["d1"], ["d1"]]
    assert f"could not record 1 attempts ({type(error).__name__}); retrying" in caplog.text


def test_ends_of_claims_handed_back_are_dropped_and_their_waiters_cancelled() -> None:
    async def main() -> tuple[set[str], bool, set[str]]:
        outcomes = Outcomes(Settings(), DeliveryQueue.__new__(DeliveryQueue), None)
        waiting = [asyncio.ensure_future(outcomes.finish(Finish(i, "we_a", "drop"))) for i in ("d1", "d2")]
        await asyncio.sleep(0)
        before = outcomes.waiting_ids()
        outcomes.forget({"d1"})
        await asyncio.sleep(0)
        cancelled = waiting[0].cancelled()
        waiting[1].cancel()
        return before, cancelled, outcomes.waiting_ids()

    before, cancelled, after = asyncio.run(main())
    assert before == {"d1", "d2"} and cancelled and after == {"d2"}
