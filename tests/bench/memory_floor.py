"""What each piece of an event's 24 hours costs in Redis at the least, layout by layout.

``python -m tests.bench.memory_floor`` (about 20 seconds) starts a
``redis-server`` of its own with the service's settings (``svcgw.storage.serverconfig``)
and writes 20,000 of each structure below the way a layout would keep it,
reading ``used_memory`` before and after: what one event costs in that
structure, its share of the key tables and expiries included. It sends
no post through the service; ``tests.bench.memory`` measures the service.
It answers "how small could it be?" for the budgets of docs/performance.md's "Redis memory per
event".

Prints a table, and, last, one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from svcgw.storage.rqformat import template
from svcgw.storage.serverconfig import server_args
from tests.bench.memory import small_post
from tests.support import free_port

N = 20_000
DAY = 86_400
ANSWER_RECORD = orjson.dumps(
    {
        "attempt": 1,
        "at": 1764045600.123,
        "ok": True,
        "status": 200,
        "error": None,
        "duration_ms": 3.4,
        "destination": "https://hooks.example.com/svcgw/callback",
        "response": "ok",
    }
)


def _delivery_id(i: int) -> str:
    return "dlv_" + hashlib.sha256(str(i).encode()).hexdigest()[:24]


def _digest(i: int) -> bytes:
    return hashlib.sha256(b"evt-%d" % i).digest()[:16]


def _rq_jobs(description: str, only: frozenset[bytes] | None) -> Callable[[redis.Redis], None]:
    def write(r: redis.Redis) -> None:
        job = template("svcgw", 30 * DAY)
        now = datetime.now(UTC).replace(tzinfo=None)
        pipe = r.pipeline(transaction=False)
        for i in range(N):
            d = _delivery_id(i)
            flat = job.flat(d, description, now)
            fields: dict[Any, Any] = {
                k: v for k, v in zip(flat[::2], flat[1::2], strict=True) if only is None or k in only
            }
            pipe.hset(f"rq:job:{d}", mapping=fields)
        pipe.execute()

    return write


# RQ's job hash of a queued delivery, as the receiver writes it (every non-empty field).
rq_job_hashes = _rq_jobs("Msg for we_123456789012345678", None)
# The fewest fields RQ reads a job back from.
rq_job_hashes_minimal = _rq_jobs("", frozenset((b"data", b"origin", b"status", b"created_at")))


def _log(fields_of: Callable[[int, bytes], dict[Any, Any]]) -> Callable[[redis.Redis], None]:
    def write(r: redis.Redis) -> None:
        post = small_post("floor", 0)
        pipe = r.pipeline(transaction=False)
        for i in range(N):
            # 100 instances, as in the memory scenario.
            pipe.xadd(f"svcgw:log:{{we_{i % 100:018d}}}", fields_of(i, post))
        pipe.execute()

    return write


log_as_kept = _log(
    lambda i, post: {
        "body": post,
        "received_at": f"{time.time():.6f}",
        "delivery": _delivery_id(i),
        "accepted": "1",
        "duplicates": "0",
    }
)
log_body_only = _log(lambda i, post: {"body": post})


def dedup_keys(r: redis.Redis) -> None:
    """Today's: one key per event id with the window as its TTL."""
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.set(f"svcgw:dedup:we_{i % 100:018d}:id:{_digest(i).hex()}{'0' * 8}", 1, ex=DAY)
    pipe.execute()


def dedup_hash_busy(r: redis.Redis) -> None:
    """Event ids as 16-byte fields of one hash per instance and window: a busy instance (a table)."""
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.hset("svcgw:seen:we_000000000000000001:20417", _digest(i), 1)
    pipe.expire("svcgw:seen:we_000000000000000001:20417", 2 * DAY)
    pipe.execute()


def dedup_hash_quiet(r: redis.Redis) -> None:
    """The same, 100 ids per instance (the memory scenario's 100 instances): each hash a listpack."""
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.hset(f"svcgw:seen:we_{i // 100:018d}:20417", _digest(i), 1)
    for j in range(N // 100):
        pipe.expire(f"svcgw:seen:we_{j:018d}:20417", 2 * DAY)
    pipe.execute()


def delivered_hash_as_kept(r: redis.Redis) -> None:
    """Today's delivered delivery: its hash with the record of its one attempt, and its TTL."""
    pipe = r.pipeline(transaction=False)
    now = f"{time.time():.6f}"
    for i in range(N):
        d = _delivery_id(i)
        pipe.hset(
            f"svcgw:delivery:{d}",
            mapping={
                "appid": "we_123456789012345678",
                "account": "acc_0123456789abcdef",
                "event_type": "Msg",
                "body": "",
                "state": "delivered",
                "received_at": now,
                "attempts": 1,
                "failures": 0,
                "events": 1,
                "delivered_at": now,
                "a1": ANSWER_RECORD,
                "ids": f'["evt-{i}"]',
            },
        )
        pipe.expire(f"svcgw:delivery:{d}", DAY)
    pipe.execute()


def outcome_stream_full(r: redis.Redis) -> None:
    """A delivered outcome as an entry of a per-instance stream: the delivery id and its attempt record."""
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.xadd(f"svcgw:outcomes:we_{i % 100:018d}", {"delivery": _delivery_id(i), "a": ANSWER_RECORD})
    pipe.execute()


def outcome_stream_bare(r: redis.Redis) -> None:
    """The least an outcome could be: a log position, an HTTP status and a duration (no destination, no answer)."""
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        pipe.xadd(f"svcgw:outcomes:we_{i % 100:018d}", {"of": f"1764045600{i:03d}-0", "s": "200", "ms": "3.4"})
    pipe.execute()


LAYOUTS: list[tuple[str, str, Callable[[redis.Redis], None]]] = [
    ("pending", "RQ job hash, as written today", rq_job_hashes),
    ("pending", "RQ job hash, only the fields RQ needs back", rq_job_hashes_minimal),
    ("log", "log entry, as kept today (84-byte post)", log_as_kept),
    ("log", "log entry, the post alone (84-byte post)", log_body_only),
    ("dedup", "de-duplication key per event id (today)", dedup_keys),
    ("dedup", "event id in a per-instance hash, busy instance (table)", dedup_hash_busy),
    ("dedup", "event id in a per-instance hash, 100 ids an instance (listpack)", dedup_hash_quiet),
    ("delivered", "delivered delivery hash with its attempt record (today)", delivered_hash_as_kept),
    ("delivered", "outcome in a per-instance stream: delivery id and attempt record", outcome_stream_full),
    ("delivered", "outcome in a per-instance stream: position, status, duration only", outcome_stream_bare),
]


def measure(r: redis.Redis, write: Callable[[redis.Redis], None]) -> float:
    r.flushall()
    before = int(r.info("memory")["used_memory"])
    write(r)
    after = int(r.info("memory")["used_memory"])
    return (after - before) / N


def main() -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                *server_args(),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            r = redis.Redis(port=port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    r.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            figures: dict[str, float] = {}
            for part, name, write in LAYOUTS:
                figures[name] = round(measure(r, write), 1)
                print(f"{part:10} {name:72} {figures[name]:8.1f} B")
        finally:
            server.terminate()
            server.wait(10)
    print(json.dumps({"memory_floor": {"events": N, "bytes_per_event": figures}}))


if __name__ == "__main__":
    main()
