"""Posting events to receivers from a few threads, bounded in count and time, and counting what arrived."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import httpx
import orjson

from tests.support import Received


class Load:
    """Posts one event per request, round robin over ``urls``, until stopped or ``limit`` posts were made.

    An event is acknowledged only by a 200; every other answer, and every
    error, counts as refused (the sender would post it again).
    """

    def __init__(self, urls: Sequence[str], *, prefix: str = "ev", limit: int = 20000, threads: int = 2,
                 duration: float = 120.0) -> None:  # fmt: skip
        self.urls = list(urls)
        self.prefix = prefix
        self.limit = limit
        self.duration = duration
        self.acknowledged: list[str] = []
        self.refused = 0
        self.stop = threading.Event()
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def acked(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def refusals(self) -> int:
        with self._lock:
            return self.refused

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.limit:
                return None
            self._next += 1
            return self._next - 1

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration
        with httpx.Client(timeout=15) as client:
            while not self.stop.is_set() and time.monotonic() < deadline:
                n = self._take()
                if n is None:
                    return
                event_id = f"{self.prefix}-{n}"
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id, "n": n}]})
                try:
                    answer = client.post(self.urls[n % len(self.urls)], content=body)
                    ok = answer.status_code == 200
                except httpx.HTTPError:
                    ok = False
                    time.sleep(0.01)
                with self._lock:
                    if ok:
                        self.acknowledged.append(event_id)
                    else:
                        self.refused += 1


def event_ids(posts: Sequence[Received]) -> Counter[str]:
    """How many times each event id arrived."""
    counts: Counter[str] = Counter()
    for post in posts:
        for event in orjson.loads(post.body)["events"]:
            counts[str(event["id"])] += 1
    return counts


def missing(acknowledged: Sequence[str], received: Callable[[], Counter[str]]) -> Callable[[], bool]:
    """A predicate for ``wait_for``: every acknowledged id has arrived."""
    wanted = set(acknowledged)
    return lambda: not (wanted - set(received()))
