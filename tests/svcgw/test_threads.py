"""svcgw.threads: blocking work off the event loop, and what a cancelled caller waits for."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio

from svcgw.threads import in_thread


def test_the_work_runs_in_another_thread_and_its_result_comes_back() -> None:
    async def main() -> tuple[int, int]:
        return await in_thread(lambda a, b: (a + b, threading.get_ident()), 2, 3)

    total, ident = asyncio.run(main())
    assert total == 5 and ident != threading.get_ident()


def test_a_cancelled_caller_stops_waiting_unless_told_to_wait() -> None:
    release = threading.Event()

    def blocked() -> None:
        release.wait(5)

    async def timed_out(abandon: bool) -> float:
        started = time.monotonic()
        if not abandon:
            asyncio.get_running_loop().call_later(0.5, release.set)
        with anyio.move_on_after(0.05):
            await in_thread(blocked, abandon_on_cancel=abandon)
        return time.monotonic() - started

    assert asyncio.run(timed_out(True)) < 0.4
    release.set()  # the abandoned thread ends
    release.clear()
    assert asyncio.run(timed_out(False)) >= 0.45
