"""The delivery engine: many deliveries at once in one worker process.

A stock RQ worker runs one job at a time (and forks per job), which leaves a
process idle for as long as a slow endpoint takes to answer. The engine
instead claims jobs in batches and runs each attempt on a thread pool; the
synchronous httpx client is shared by the threads. The main loop:

* promotes retries that are due (RQ's scheduled registry) to the queue;
* hands back jobs whose lease ran out (their worker died);
* extends the leases of the jobs it holds;
* claims as many jobs as it has free slots, or blocks until one arrives.

One failing destination cannot take every slot: at most
``SVCGW_DESTINATION_CONCURRENCY`` attempts run against one host at once; a
job over that cap goes back to the scheduled registry for a moment without
counting an attempt.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
from redis import Redis
from redis.exceptions import RedisError

from receiver.metrics import AttemptRecorder
from svcgw import keys
from svcgw.settings import Settings
from svcgw.vault import TokenVault

from .delivery import Attempt, Prepared, decide, prepare, send
from .jobs import exc_info_field
from .queue import DeliveryQueue
from .transport import make_client

__all__ = ["Engine"]

log = logging.getLogger("svcgw.delivery")

PROMOTE_EVERY = 0.1
RECLAIM_EVERY = 1.0
DEFER_SECONDS = 0.25
CLAIM_BATCH = 100


class DestinationSlots:
    """Counts attempts in flight per destination host."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def acquire(self, host: str) -> bool:
        with self._lock:
            if self._counts[host] >= self.cap:
                return False
            self._counts[host] += 1
            return True

    def release(self, host: str) -> None:
        with self._lock:
            self._counts[host] -= 1
            if self._counts[host] <= 0:
                del self._counts[host]


def worker_name() -> str:
    return f"svcgw.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(3)}"


class Engine:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        vault: TokenVault,
        *,
        client: httpx.Client | None = None,
        name: str | None = None,
        on_attempt: Callable[[Prepared, Attempt, str], None] | None = None,
    ) -> None:
        # ``redis`` must return bytes (decode_responses=False): bodies are raw.
        self.settings = settings
        self.redis = redis
        self.vault = vault
        self.name = name or worker_name()
        self.queue = DeliveryQueue(redis, settings.queue_name, lease_seconds=settings.lease_seconds)
        self.capacity = settings.delivery_concurrency
        self.client = client or make_client(
            allow=settings.allow_private_destinations,
            timeout=settings.delivery_timeout,
            max_connections=max(self.capacity, 10),
        )
        self.slots = DestinationSlots(settings.destination_concurrency)
        self.on_attempt = on_attempt if on_attempt is not None else AttemptRecorder(settings)
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        self._slot_freed = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="delivery")

    # --- main loop ------------------------------------------------------------
    def run(self, stop: threading.Event, *, burst: bool = False) -> None:
        """Deliver until ``stop`` is set (or, with ``burst``, until nothing is left to do)."""
        log.info("delivery engine %s started with %d slots", self.name, self.capacity)
        next_promote = next_reclaim = next_extend = 0.0
        failures = 0
        while not stop.is_set():
            try:
                now = time.time()
                if now >= next_promote:
                    promotion = self.queue.promote_due()
                    next_promote = now + PROMOTE_EVERY
                    if promotion.next_due is not None:
                        next_promote = max(min(next_promote, promotion.next_due), now + 0.005)
                if now >= next_reclaim:
                    self.queue.reclaim_expired()
                    next_reclaim = now + RECLAIM_EVERY
                if now >= next_extend:
                    self.queue.extend(self.held())
                    next_extend = now + self.settings.lease_seconds / 3
                free = self.capacity - len(self.held())
                claimed: list[str] = []
                if free > 0:
                    claimed = self.queue.claim(min(free, CLAIM_BATCH), self.name)
                    for delivery_id in claimed:
                        with self._held_lock:
                            self._held.add(delivery_id)
                        self._pool.submit(self._run_one, delivery_id)
                failures = 0
                if claimed:
                    continue
                if burst and not self.held() and self._nothing_pending():
                    break
                wait = min(next_promote, next_reclaim, next_extend) - time.time()
                wait = min(max(wait, 0.005), 0.5)
                if free > 0:
                    self.queue.wait(wait)
                else:
                    self._slot_freed.wait(wait)
                    self._slot_freed.clear()
            except RedisError as exc:
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                log.warning("redis unavailable (%s); retrying in %.1fs", type(exc).__name__, delay)
                stop.wait(delay)
        self._shutdown()

    def held(self) -> list[str]:
        with self._held_lock:
            return list(self._held)

    def _nothing_pending(self) -> bool:
        depth = self.queue.depth()
        return depth["queued"] == 0 and depth["inflight"] == 0 and depth["scheduled"] == 0

    def _shutdown(self) -> None:
        """Let attempts in flight finish within the delivery timeout; hand back the rest."""
        deadline = time.monotonic() + self.settings.delivery_timeout + 2
        while self.held() and time.monotonic() < deadline:
            self._slot_freed.wait(0.05)
            self._slot_freed.clear()
        leftover = self.held()
        if leftover:
            try:
                released = self.queue.release(leftover)
                log.info("handed back %d deliveries on shutdown", released)
            except RedisError:
                log.warning("could not hand back %d deliveries; their leases will expire", len(leftover))
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("delivery engine %s stopped", self.name)

    # --- one attempt ----------------------------------------------------------
    def _run_one(self, delivery_id: str) -> None:
        try:
            self._attempt(delivery_id)
        except Exception:
            # The claim stays in Redis and its lease is no longer extended, so
            # the job is handed back and tried again: nothing is lost.
            log.exception("delivery %s: attempt aborted", delivery_id)
        finally:
            with self._held_lock:
                self._held.discard(delivery_id)
            self._slot_freed.set()

    def _attempt(self, delivery_id: str) -> None:
        prepared = prepare(self.redis, self.vault, delivery_id)
        if prepared is None:
            log.warning("delivery %s: its data expired; dropping the job", delivery_id)
            self.redis.zrem(self.queue.inflight_key, delivery_id)
            self.redis.delete(keys.rq_job(delivery_id))
            return
        host = urlsplit(prepared.destination.url).netloc.lower() if prepared.destination else ""
        if host and not self.slots.acquire(host):
            self.queue.defer(delivery_id, DEFER_SECONDS)
            return
        try:
            attempt = send(self.client, prepared)
        finally:
            if host:
                self.slots.release(host)
        step, delay = decide(prepared, attempt, self.settings.retry_schedule)
        number = prepared.attempts + 1
        if step == "dead":
            due: float | None = time.time() + self.settings.dead_letter_retention
            retention = self.settings.dead_letter_retention
        else:
            due = time.time() + delay if delay is not None else None
            retention = max(self.settings.log_retention, 86400)
        self.queue.finish(
            delivery_id,
            prepared.appid,
            step,
            attempt.record(number),
            due=due,
            retention=retention,
            error=exc_info_field(attempt.error or "") if step == "dead" else b"",
        )
        log.info(
            "delivery attempt",
            extra={
                "appid": prepared.appid,
                "delivery_id": delivery_id,
                "attempt": number,
                "outcome": step,
                "status": attempt.status,
                "error": attempt.error,
                "duration_ms": round(attempt.duration * 1000, 1),
            },
        )
        if self.on_attempt is not None:
            self.on_attempt(prepared, attempt, step)
